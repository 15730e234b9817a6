"""The bulk drift sweep (sweeping.Sweeper) over a thousand objects, without a cluster.

One pass over one (broker, kind) is driven with a scripted broker (the ``BrokerClient``
protocol, answering through the real client's status mapping) and a recorder in place of the
Kubernetes status writes. What is pinned: a pass costs one list call whatever the number of
objects and finds each object's item by index, not by scanning; it writes status and posts
Events only for objects that changed; it yields to the event loop every ``SLICE`` objects; and it
leaves objects a handler is working on, or whose index entry predates the handler's last run.
"""

from __future__ import annotations

import asyncio
from typing import Any

import kopf
import pytest
from hutch_operator.core import brokerclient, references
from hutch_operator.topology import snapshots, sweeping, translators
from hutch_operator.topology.handlers import queues, registration

NAMESPACE = "team-a"
GENERATION = 2
INDEX = registration.desired_index(queues.OPS)
GROUP = ("ref", NAMESPACE, "hutch")
# The size of a pass: over 60 slices of ``sweeping.SLICE``, and a per-object call or write would
# be a thousand. The claims hold at any size (none is timed); 2,000-3,000 cost 3 s of the fast
# level's CPU for nothing more (#29).
OBJECTS = 1000
BROKERS: references.BrokerIndex = {
    (NAMESPACE, "hutch"): [references.BrokerFacts(NAMESPACE, "hutch", True, False)]
}


class ListingBroker:
    """A broker holding ``queues`` (name → listed item); PUTs declare, GETs list."""

    base_url = "http://hutch.team-a.svc:15672"

    def __init__(self, queues_: dict[str, dict[str, Any]]) -> None:
        self.queues = queues_
        self.requests: list[tuple[str, str]] = []

    async def call(self, request: brokerclient.Request) -> Any:
        self.requests.append((request.method, request.path))
        if request.method == "GET" and request.path.startswith("/api/queues/%2F?"):
            return list(self.queues.values())
        return brokerclient._outcome(request, 204, "", self.base_url)

    async def is_hutch(self) -> bool:
        return True


class StatusWrites:
    """Stands in for ``kube.api()``: records the sweep's status patches."""

    def __init__(self) -> None:
        self.patches: list[tuple[str, dict[str, Any]]] = []

    async def merge_patch(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        self.patches.append((path, body))
        return {}


def listed(name: str, max_length: int = 100, **overrides: Any) -> dict[str, Any]:
    item = {
        "name": name, "durable": True, "auto_delete": False,
        "arguments": {"x-max-length": max_length}, "messages": 0, "messages_ready": 0,
        "messages_unacknowledged": 0, "consumers": 0, "policy": None, "operator_policy": None,
        "effective_policy_definition": {},
    }  # fmt: skip
    return {**item, **overrides}


def entry(name: str, *, seen: float = 0.0, stats_of: dict[str, Any] | None = None) -> Any:
    """A settled (Ready for its generation) Queue as the ``desired`` index keeps it."""
    status: dict[str, Any] = {
        "observedGeneration": GENERATION, "declared": True,
        "brokerEndpoint": ListingBroker.base_url,
        "conditions": [{"type": "Ready", "status": "True", "reason": "Declared",
                        "observedGeneration": GENERATION}],
    }  # fmt: skip
    if stats_of is not None:
        status.update(translators.queue_stats(stats_of))
    raw = {
        "apiVersion": "hutch.dev/v1alpha1", "kind": "Queue",
        "metadata": {"name": name, "namespace": NAMESPACE, "uid": f"uid-{name}",
                     "generation": GENERATION, "creationTimestamp": "2026-01-01T00:00:00Z",
                     "resourceVersion": "7"},
        "spec": {"brokerRef": {"name": "hutch"}, "limits": {"maxLength": 100}},
        "status": status,
    }  # fmt: skip
    [(group, desired)] = sweeping.index_desired(kopf.Body(raw), now=seen).items()  # type: ignore[arg-type]
    assert group == GROUP
    return desired


@pytest.fixture
def events(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    posted: list[tuple[str, str]] = []

    def recorder(type_: str) -> Any:
        def post(body: Any, *, reason: str, message: str = "") -> None:
            posted.append((type_, reason))

        return post

    monkeypatch.setattr(kopf, "warn", recorder("Warning"))
    monkeypatch.setattr(kopf, "info", recorder("Normal"))
    return posted


@pytest.fixture
def writes(monkeypatch: pytest.MonkeyPatch) -> StatusWrites:
    recorder = StatusWrites()

    async def default_user(namespace: str, name: str) -> tuple[str, str]:
        return "user", "secret"

    monkeypatch.delenv("HUTCH_BROKER_ADDRESSES", raising=False)
    monkeypatch.setenv("HUTCH_SYNC_PERIOD", "300")
    monkeypatch.setattr(references, "_default_user", default_user)
    monkeypatch.setattr(sweeping.kube, "api", lambda: recorder)
    snapshots.reset()
    return recorder


def sweeper(entries: list[Any], broker: ListingBroker, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setattr(brokerclient.POOL, "get", lambda *args, **kwargs: broker)
    indices = {INDEX: {GROUP: entries}, registration.BROKER_INDEX: BROKERS}
    kinds = {INDEX: (queues.OPS, registration.claims_index(queues.OPS))}
    return sweeping.Sweeper(indices, kinds, brokers=registration.BROKER_INDEX,
                            vhost_claims=registration.VHOST_CLAIMS)  # fmt: skip


async def test_a_pass_with_nothing_changed_is_one_list_call_and_no_write(
    writes: StatusWrites, events: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    names = [f"q{i:05d}" for i in range(OBJECTS)]
    broker = ListingBroker({name: listed(name) for name in names})
    entries = [entry(name, stats_of=broker.queues[name]) for name in names]
    report = await sweeper(entries, broker, monkeypatch).sweep(INDEX, GROUP)
    assert broker.requests == [("GET", translators.queue_list("/").path)]
    assert (report.objects, report.judged, report.status_writes) == (OBJECTS, OBJECTS, 0)
    assert writes.patches == [] and events == []
    assert report.slices == -(-OBJECTS // sweeping.SLICE)  # yielded every SLICE objects


async def test_a_pass_acts_on_exactly_the_objects_that_differ(
    writes: StatusWrites, events: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """1,000 objects: one missing (re-declared), one with another limit (re-applied), one with
    another immutable property (BrokerMismatch, not touched), one whose messages moved (stats
    written); nothing else is written or called."""
    names = [f"q{i:05d}" for i in range(OBJECTS)]
    broker = ListingBroker({name: listed(name) for name in names})
    entries = [entry(name, stats_of=broker.queues[name]) for name in names]
    del broker.queues["q00010"]
    broker.queues["q00020"] = listed("q00020", max_length=5)
    broker.queues["q00030"] = listed("q00030", durable=False)
    broker.queues["q00040"] = listed("q00040", messages=3, messages_ready=3)
    report = await sweeper(entries, broker, monkeypatch).sweep(INDEX, GROUP)

    assert broker.requests == [
        ("GET", translators.queue_list("/").path),
        ("PUT", "/api/queues/%2F/q00010"),
        ("PUT", "/api/queues/%2F/q00020"),
    ]
    assert events == [("Warning", "DriftCorrected"), ("Warning", "DriftCorrected"),
                      ("Warning", "BrokerMismatch")]  # fmt: skip
    written = {path.rsplit("/", 2)[-2]: body for path, body in writes.patches}
    assert sorted(written) == ["q00030", "q00040"]
    assert written["q00030"]["status"]["conditions"][0]["reason"] == "BrokerMismatch"
    assert written["q00040"]["status"]["messages"] == 3
    # Each write is conditional on the version the pass judged.
    assert {body["metadata"]["resourceVersion"] for body in written.values()} == {"7"}
    assert report.status_writes == 2


async def test_a_first_pass_over_fresh_queues_writes_only_where_a_policy_applies(
    writes: StatusWrites, events: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Queue's create records zero counts and no policy fields (``fresh_queue_stats``, no GET).
    The first pass over 1,000 such Queues must not write each one to say "no policy"; it writes
    the one a policy applies to."""
    names = [f"q{i:05d}" for i in range(OBJECTS)]
    broker = ListingBroker({name: listed(name) for name in names})
    broker.queues["q00050"] = listed("q00050", policy="ttl",
                                     effective_policy_definition={"message-ttl": 60000})  # fmt: skip
    entries = [entry(name) for name in names]
    for desired in entries:
        desired.raw["status"].update(translators.fresh_queue_stats())
    report = await sweeper(entries, broker, monkeypatch).sweep(INDEX, GROUP)
    assert broker.requests == [("GET", translators.queue_list("/").path)]
    [(path, body)] = writes.patches
    assert path.rsplit("/", 2)[-2] == "q00050"
    assert body["status"]["policy"] == "ttl"
    assert body["status"]["effectivePolicyDefinition"] == {"message-ttl": 60000}
    assert report.status_writes == 1 and events == []


async def test_a_failed_object_is_declared_again(
    writes: StatusWrites, events: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A permanent failure (BrokerRejected) is not retried by Kopf: the pass retries it."""
    broker = ListingBroker({"q1": listed("q1")})
    failed = entry("q1")
    failed.raw["status"]["conditions"] = [{"type": "Ready", "status": "False",
                                           "reason": "BrokerRejected"}]  # fmt: skip
    await sweeper([failed], broker, monkeypatch).sweep(INDEX, GROUP)
    assert broker.requests == [("PUT", "/api/queues/%2F/q1")]
    [(_, body)] = writes.patches
    assert body["status"]["conditions"][0]["reason"] == "Declared"


async def test_objects_a_handler_is_working_on_are_left_to_it(
    writes: StatusWrites, events: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    broker = ListingBroker({})  # both missing: a pass that judged them would re-declare
    running, fresh = entry("running"), entry("fresh", seen=0.0)
    snapshots.wrote("uid-fresh")  # its handler finished after the entry was indexed
    with snapshots.handling("uid-running"):
        report = await sweeper([running, fresh], broker, monkeypatch).sweep(INDEX, GROUP)
    assert report.judged == 0
    assert broker.requests == [] and writes.patches == []


def test_an_object_with_a_kopf_retry_due_is_left_to_it() -> None:
    """Kopf's progress holds a handler that neither succeeded nor failed for good: its retry
    owns the object (a pass declaring it could lose the status race and leave it unowned)."""
    due = {"progress": {"declare": {"retries": 1, "delayed": "2026-01-01T00:00:10"}}}
    done = {"progress": {"declare": {"retries": 1, "success": True}}}
    failed = {"progress": {"declare": {"retries": 0, "failure": True}}}
    assert sweeping.kopf_pending(due)
    assert not sweeping.kopf_pending(done) and not sweeping.kopf_pending(failed)
    assert not sweeping.kopf_pending(None) and not sweeping.kopf_pending({})
    item = sweeping.Desired({"metadata": {"uid": "u"}}, seen=100.0, pending=True)
    assert not sweeping.judgeable(item, written=-1.0, busy=False, pass_started=200.0,
                                  now=200.0, period=300.0)  # fmt: skip


class Conflicting(StatusWrites):
    """The apiserver refuses the conditional write: a handler wrote the object meanwhile."""

    async def merge_patch(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        self.patches.append((path, body))
        if "metadata" in body:
            raise sweeping.errors.KubeError("409 Conflict", status=409)
        return {}


async def test_a_lost_race_after_a_declare_still_records_ownership(
    events: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pass re-declared a missing queue; its status write lost to a handler's (409): the
    fact that this object declared it is written anyway, without the rest of the patch."""
    recorder = Conflicting()
    monkeypatch.setattr(sweeping.kube, "api", lambda: recorder)
    monkeypatch.setattr(references, "_default_user", _user)
    monkeypatch.delenv("HUTCH_BROKER_ADDRESSES", raising=False)
    snapshots.reset()
    broker = ListingBroker({})
    failed = entry("q1")  # its first declare failed: it never owned the queue
    failed.raw["status"]["conditions"] = [{"type": "Ready", "status": "False",
                                           "reason": "BrokerRejected"}]  # fmt: skip
    del failed.raw["status"]["declared"], failed.raw["status"]["brokerEndpoint"]
    report = await sweeper([failed], broker, monkeypatch).sweep(INDEX, GROUP)
    assert broker.requests == [("PUT", "/api/queues/%2F/q1")]
    [(_, conditional), (_, ownership)] = recorder.patches
    assert conditional["metadata"] == {"resourceVersion": "7"}
    assert ownership == {"status": {"declared": True, "brokerEndpoint": ListingBroker.base_url}}
    assert report.status_writes == 1


async def _user(namespace: str, name: str) -> tuple[str, str]:
    return "user", "secret"


def test_judgeable() -> None:
    """Held back while the handler runs, and for one period after a write newer than the
    entry or the pass (the entry's status or the listing may predate it)."""
    item = sweeping.Desired({"metadata": {"uid": "u"}}, seen=100.0)
    base = {"busy": False, "pass_started": 200.0, "now": 200.0, "period": 300.0}
    assert sweeping.judgeable(item, written=50.0, **base)  # written before the entry
    assert not sweeping.judgeable(item, written=100.0, **base)  # entry may predate it
    assert not sweeping.judgeable(item, written=150.0, **base)
    assert not sweeping.judgeable(item, written=50.0, **{**base, "busy": True})
    late = {**base, "now": 460.0}  # no event ever refreshed the entry: judged after a period
    assert sweeping.judgeable(item, written=150.0, **late)
    entry_after_pass = sweeping.Desired({"metadata": {"uid": "u"}}, seen=300.0)
    assert not sweeping.judgeable(entry_after_pass, written=250.0, **{**base, "now": 300.0})


def test_objects_are_grouped_by_the_broker_they_name() -> None:
    assert sweeping.group_of({"brokerRef": {"name": "b"}}, "ns") == ("ref", "ns", "b")
    ref = {"brokerRef": {"name": "b", "namespace": "infra"}}
    assert sweeping.group_of(ref, "ns") == ("ref", "infra", "b")
    assert sweeping.group_of({"connectionSecret": {"name": "s"}}, "ns") == ("secret", "ns", "s")
    assert sweeping.group_of({}, "ns") is None


def test_deleting_objects_and_kopf_bookkeeping_stay_out_of_the_index() -> None:
    raw: Any = {
        "metadata": {"name": "q", "namespace": "ns", "uid": "u"},
        "spec": {"brokerRef": {"name": "b"}},
        "status": {"kopf": {"progress": {"x": 1}}, "observedGeneration": 1},
    }
    [desired] = sweeping.index_desired(kopf.Body(raw), now=1.0).values()
    assert desired.raw["status"] == {"observedGeneration": 1}
    raw["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    assert sweeping.index_desired(kopf.Body(raw), now=1.0) == {}


def test_listing_lookups_index_once_per_field_set() -> None:
    items = [{"vhost": v, "user": f"u{i}", "name": f"n{i}"} for i in range(1000) for v in "ab"]
    listing = snapshots.Listing(items)
    for i in range(1000):
        assert listing.first(vhost="a", user=f"u{i}") == items[2 * i]
        assert listing.first(name=f"n{i}") == items[2 * i]
    assert listing.first(name="absent") is None
    assert len(listing.all(name="n5")) == 2
    assert listing.index_builds == 2  # (user, vhost) and (name): not one scan per lookup


async def test_a_pass_lists_each_path_once(monkeypatch: pytest.MonkeyPatch) -> None:
    broker = ListingBroker({"q": listed("q")})
    request = translators.queue_list("/")
    with snapshots.scope():
        first = await snapshots.get(broker, "b", "queue", request)
        again = await snapshots.get(broker, "b", "queue", request)
    assert first is again and len(broker.requests) == 1
    await snapshots.get(broker, "b", "queue", request)  # outside a pass: listed each time
    assert len(broker.requests) == 2


def test_each_group_is_due_once_per_period_from_a_random_point() -> None:
    a, b = ("queues_desired", GROUP), ("queues_desired", ("ref", "other", "b"))
    first = sweeping.schedule({}, [a, b], now=100.0, period=10.0)
    assert all(100.0 <= when <= 110.0 for when in first.values())
    kept = sweeping.schedule({a: 123.0}, [a], now=120.0, period=10.0)
    assert kept == {a: 123.0}  # a known group keeps its slot; b holds no objects: dropped


async def test_the_sweep_runs_each_group_once_per_period(
    writes: StatusWrites, events: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """One task for every group; each pass is one list call."""
    monkeypatch.setenv("HUTCH_SYNC_PERIOD", "0.2")
    broker = ListingBroker({"q": listed("q")})
    task = asyncio.create_task(sweeper([entry("q", stats_of=listed("q"))], broker,
                                       monkeypatch).run())  # fmt: skip
    await asyncio.sleep(0.9)
    task.cancel()
    assert 3 <= len(broker.requests) <= 5, broker.requests
