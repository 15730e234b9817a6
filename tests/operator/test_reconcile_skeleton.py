"""The reconcile skeleton (reconciling.py) driven by a fake ``BrokerClient``: no cluster, no HTTP.

The real Queue and Exchange ``KindOps`` run against ``FakeBroker``, which implements the
``brokerclient.BrokerClient`` protocol and answers scripted HTTP statuses through the client's
own status mapping (``brokerclient._outcome``). Only the two Kubernetes reads ``resolve`` makes
are replaced: the Broker's default-user Secret and the connection pool. Events are recorded
instead of posted. What is pinned: the error → Kopf retry-class mapping (docs/contracts/operator.md#errors), the
reserved ``amq.`` names, ``observedGeneration`` on every Ready write, and delete's 404 = gone.
"""

from __future__ import annotations

from typing import Any

import kopf
import pytest
from hutch_operator.core import brokerclient, errors, references
from hutch_operator.topology import abandoned, reconciling, sweeping, translators
from hutch_operator.topology.handlers import exchanges, queues

NAMESPACE = "team-a"
ENDPOINT = "http://hutch.team-a.svc:15672"
GENERATION = 3

Events = list[tuple[str, str]]


class FakeBroker:
    """A ``BrokerClient``: records requests; ``script[(method, path)]`` is an HTTP status."""

    base_url = ENDPOINT

    def __init__(self) -> None:
        self.requests: list[tuple[str, str]] = []
        self.script: dict[tuple[str, str], int] = {}
        self.down = False
        self.existing: set[str] = set()  # paths a PUT finds (204); others it creates (201)

    async def call(self, request: brokerclient.Request) -> Any:
        self.requests.append((request.method, request.path))
        if self.down:
            raise errors.BrokerUnavailableError(f"{self.base_url}: ClientConnectorError")
        status = self.script.get((request.method, request.path), 200)
        if request.method == "PUT" and status == 200:  # as the brokers answer a declare
            created = request.path not in self.existing
            self.existing.add(request.path)
            return brokerclient._outcome(request, 201 if created else 204, "", self.base_url)
        text = '{"reason": "scripted"}' if status >= 300 else "{}"
        return brokerclient._outcome(request, status, text, self.base_url)

    async def is_hutch(self) -> bool:
        return True


def _protocol_check(client: FakeBroker) -> brokerclient.BrokerClient:
    return client  # mypy: FakeBroker satisfies the protocol the skeleton is written against


@pytest.fixture
def broker(monkeypatch: pytest.MonkeyPatch) -> FakeBroker:
    fake = FakeBroker()

    async def default_user(namespace: str, name: str) -> tuple[str, str]:
        return "user", "secret"

    monkeypatch.delenv("HUTCH_BROKER_ADDRESSES", raising=False)
    monkeypatch.setenv("HUTCH_QUEUE_STATS", "false")
    monkeypatch.setattr(references, "_default_user", default_user)
    monkeypatch.setattr(brokerclient.POOL, "get", lambda *args, **kwargs: fake)
    return fake


@pytest.fixture
def events(monkeypatch: pytest.MonkeyPatch) -> Events:
    """(type, reason) of every event the skeleton posts; nothing reaches Kubernetes."""
    posted: list[tuple[str, str]] = []

    def recorder(type_: str) -> Any:
        def post(body: Any, *, reason: str, message: str = "") -> None:
            posted.append((type_, reason))

        return post

    monkeypatch.setattr(kopf, "warn", recorder("Warning"))
    monkeypatch.setattr(kopf, "info", recorder("Normal"))
    return posted


BROKERS: references.BrokerIndex = {
    (NAMESPACE, "hutch"): [references.BrokerFacts(NAMESPACE, "hutch", True, False)]
}


def context(
    ops: reconciling.KindOps = queues.OPS,
    *,
    name: str = "orders",
    spec: dict[str, Any] | None = None,
    status: dict[str, Any] | None = None,
) -> reconciling.Context:
    raw: Any = {
        "metadata": {
            "name": name,
            "namespace": NAMESPACE,
            "uid": f"uid-{name}",
            "generation": GENERATION,
            "creationTimestamp": "2024-01-01T00:00:00Z",
        },
        "spec": {"brokerRef": {"name": "hutch"}, **(spec or {})},
        "status": status or {},
    }
    return reconciling.Context(ops, kopf.Body(raw), kopf.Patch(), BROKERS, {})


def ready(ctx: reconciling.Context) -> dict[str, Any]:
    [condition] = [c for c in ctx.patch.status["conditions"] if c["type"] == "Ready"]
    return dict(condition)


async def declare(ctx: reconciling.Context, retry: int = 0) -> None:
    await reconciling.declare(ctx, cause="create", retry=retry)


QUEUE_PATH = "/api/queues/%2F/orders"


async def declared_status() -> dict[str, Any]:
    """The status a first, successful declare recorded (Ready, this generation)."""
    done = context()
    await declare(done)
    return dict(done.patch.status)


# -- declare -------------------------------------------------------------------


async def test_declare_sets_ready_with_observed_generation(
    broker: FakeBroker, events: Events
) -> None:
    ctx = context()
    await declare(ctx)
    assert broker.requests == [("PUT", QUEUE_PATH)]
    assert ready(ctx)["status"] == "True" and ready(ctx)["reason"] == "Declared"
    assert ready(ctx)["observedGeneration"] == GENERATION
    assert ctx.patch.status["observedGeneration"] == GENERATION
    assert ctx.patch.status["declared"] is True
    assert ctx.patch.status["brokerEndpoint"] == ENDPOINT
    # No Event for a success: the Ready condition says it, and an Event per object was half of
    # the operator's Kubernetes writes at 10,000 Queues (docs/isolation/operator.md).
    assert events == []


async def test_a_queue_the_declare_created_has_zero_stats_without_a_read(
    broker: FakeBroker, events: Events, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The broker answered 201: nothing to read back. Its policy fields are the sweep's."""
    monkeypatch.setenv("HUTCH_QUEUE_STATS", "true")
    ctx = context()
    await declare(ctx)
    assert broker.requests == [("PUT", QUEUE_PATH)]
    assert {key: ctx.patch.status[key] for key in translators.fresh_queue_stats()} == {
        "messages": 0, "messagesReady": 0, "messagesUnacknowledged": 0, "consumers": 0
    }  # fmt: skip
    assert ctx.patch.status["statsUpdatedAt"]
    assert not translators.POLICY_STATS & set(ctx.patch.status)


async def test_a_queue_that_existed_has_its_stats_read_after_the_declare(
    broker: FakeBroker, events: Events, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The broker answered 204 (an application's queue, or a re-declare): one GET, as before."""
    monkeypatch.setenv("HUTCH_QUEUE_STATS", "true")
    broker.existing.add(QUEUE_PATH)
    ctx = context()
    await declare(ctx)
    assert broker.requests == [("PUT", QUEUE_PATH), ("GET", QUEUE_PATH)]
    assert ctx.patch.status["effectivePolicyDefinition"] == {}
    assert ctx.patch.status["messages"] == 0


@pytest.mark.parametrize("status", [400, 405, 409, 422])
async def test_broker_4xx_is_a_permanent_error(
    broker: FakeBroker, events: Events, status: int
) -> None:
    broker.script[("PUT", QUEUE_PATH)] = status
    ctx = context()
    with pytest.raises(kopf.PermanentError):
        await declare(ctx)
    assert ready(ctx)["status"] == "False" and ready(ctx)["reason"] == "BrokerRejected"
    assert ready(ctx)["observedGeneration"] == GENERATION
    assert ctx.patch.status["observedGeneration"] == GENERATION
    assert "declared" not in ctx.patch.status
    assert events == [("Warning", "BrokerRejected")]


@pytest.mark.parametrize("status", [500, 502, 503])
async def test_broker_5xx_is_a_temporary_error_with_backoff(
    broker: FakeBroker, events: Events, status: int
) -> None:
    broker.script[("PUT", QUEUE_PATH)] = status
    ctx = context()
    with pytest.raises(kopf.TemporaryError) as caught:
        await declare(ctx, retry=2)
    assert caught.type is kopf.TemporaryError  # not the PermanentError sibling
    assert 5.0 * 4 * 0.8 <= caught.value.delay <= 5.0 * 4 * 1.2  # 5 s · 2^retry, ±20 %
    assert ready(ctx)["reason"] == "BrokerUnavailable"
    assert ready(ctx)["observedGeneration"] == GENERATION


async def test_unreachable_broker_is_a_temporary_error(broker: FakeBroker, events: Events) -> None:
    broker.down = True
    ctx = context()
    with pytest.raises(kopf.TemporaryError) as caught:
        await declare(ctx)
    assert 4.0 <= caught.value.delay <= 6.0
    assert ready(ctx)["reason"] == "BrokerUnavailable"
    assert events == [("Warning", "BrokerUnavailable")]


@pytest.mark.parametrize(
    ("status", "reason", "delay"),
    [(401, "AuthenticationFailed", 60.0), (403, "AuthenticationFailed", 60.0),
     (404, "VhostNotFound", 30.0)],
)  # fmt: skip
async def test_retryable_refusals_keep_their_fixed_delay(
    broker: FakeBroker, events: Events, status: int, reason: str, delay: float
) -> None:
    broker.script[("PUT", QUEUE_PATH)] = status
    ctx = context()
    with pytest.raises(kopf.TemporaryError) as caught:
        await declare(ctx)
    assert caught.value.delay == delay
    assert ready(ctx)["reason"] == reason


async def test_the_warning_is_posted_once_per_new_reason(
    broker: FakeBroker, events: Events
) -> None:
    broker.down = True
    failed = context()
    with pytest.raises(kopf.TemporaryError):
        await declare(failed)
    again = context(status=dict(failed.patch.status))
    with pytest.raises(kopf.TemporaryError):
        await declare(again, retry=1)
    assert events == [("Warning", "BrokerUnavailable")]


@pytest.mark.parametrize(
    ("ops", "name", "spec"),
    [
        (queues.OPS, "amq.orders", {}),  # metadata.name
        (queues.OPS, "orders", {"name": "amq.orders"}),  # spec.name
        (exchanges.OPS, "amq.events", {}),
    ],
)
async def test_reserved_amq_names_are_refused_permanently(
    broker: FakeBroker, events: Events, ops: reconciling.KindOps, name: str, spec: dict[str, Any]
) -> None:
    ctx = context(ops, name=name, spec=spec)
    with pytest.raises(kopf.PermanentError, match=r"amq\. are reserved"):
        await declare(ctx)
    assert broker.requests == []
    assert ready(ctx)["reason"] == "InvalidSpec"
    assert ready(ctx)["observedGeneration"] == GENERATION


async def test_invalid_spec_is_permanent_and_touches_no_broker(
    broker: FakeBroker, events: Events
) -> None:
    ctx = context(spec={"limits": {"maxLength": "lots"}})
    with pytest.raises(kopf.PermanentError, match="invalid spec"):
        await declare(ctx)
    assert broker.requests == []
    assert ready(ctx)["reason"] == "InvalidSpec"


async def test_resume_of_a_ready_current_object_costs_no_broker_call(
    broker: FakeBroker, events: Events
) -> None:
    resumed = context(status=await declared_status())
    await reconciling.declare(resumed, cause="resume", retry=0)
    assert broker.requests == [("PUT", QUEUE_PATH)]  # only the first declare
    assert not resumed.patch


async def test_resume_after_a_spec_change_declares_again(
    broker: FakeBroker, events: Events
) -> None:
    stale = {**await declared_status(), "observedGeneration": GENERATION - 1}
    resumed = context(status=stale)
    await reconciling.declare(resumed, cause="resume", retry=0)
    assert broker.requests == [("PUT", QUEUE_PATH)] * 2
    assert resumed.patch.status["observedGeneration"] == GENERATION


async def test_a_create_retry_of_an_object_declared_by_an_earlier_process_costs_no_call(
    broker: FakeBroker, events: Events
) -> None:
    """Kopf's delayed create retry, surviving in the annotations, fires in a new operator
    process after the old one declared the object and recorded Ready on its way out."""
    retried = context(status=await declared_status())
    await reconciling.declare(retried, cause="create", retry=0)
    assert broker.requests == [("PUT", QUEUE_PATH)]
    assert not retried.patch


async def test_a_retry_of_an_object_declared_since_its_failure_costs_no_call(
    broker: FakeBroker, events: Events
) -> None:
    """An update attempt failed (Kopf will retry it); a sweep tick or a wake-up declared the
    object meanwhile; the retry finds it Ready for this generation and leaves the broker be."""
    retried = context(status=await declared_status())
    await reconciling.declare(retried, cause="update", retry=1)
    assert broker.requests == [("PUT", QUEUE_PATH)]


async def test_an_update_of_a_ready_current_object_declares_again(
    broker: FakeBroker, events: Events
) -> None:
    """The nudge annotation (a Broker back) changes no generation and must still declare."""
    nudged = context(status=await declared_status())
    await reconciling.declare(nudged, cause="update", retry=0)
    assert broker.requests == [("PUT", QUEUE_PATH)] * 2


async def test_a_sweep_tick_leaves_an_object_whose_handler_has_not_run_yet(
    broker: FakeBroker, events: Events
) -> None:
    """A timer's body can predate the create (or update) handler's status patch; the tick must
    not be a second declare beside the handler's."""
    await sweeping.tick(context(), retry=0)  # never handled: no observedGeneration
    stale = context(status={"observedGeneration": GENERATION - 1})
    await sweeping.tick(stale, retry=0)  # a spec change the update handler has not finished
    assert broker.requests == []


async def test_a_sweep_tick_declares_again_after_a_failure_of_this_generation(
    broker: FakeBroker, events: Events
) -> None:
    """A permanent failure (here a 400) is not retried by Kopf; the sweep is what retries it."""
    broker.script[("PUT", QUEUE_PATH)] = 400
    failed = context()
    with pytest.raises(kopf.PermanentError):
        await declare(failed)
    broker.script.clear()
    ticked = context(status=dict(failed.patch.status))
    await sweeping.tick(ticked, retry=0)
    assert broker.requests == [("PUT", QUEUE_PATH)] * 2
    assert ready(ticked)["status"] == "True"


# -- delete --------------------------------------------------------------------

OWNED = {"declared": True, "brokerEndpoint": ENDPOINT}


async def delete(ctx: reconciling.Context, runtime: float = 0.0) -> None:
    await reconciling.delete(ctx, runtime=runtime, retry=0)


@pytest.mark.parametrize("if_empty", [False, True])
async def test_404_on_delete_counts_as_deleted(
    broker: FakeBroker, events: Events, if_empty: bool
) -> None:
    broker.script[("GET", QUEUE_PATH + "?columns=messages,consumers")] = 404
    broker.script[("DELETE", QUEUE_PATH)] = 404
    ctx = context(spec={"deleteIfEmpty": if_empty}, status=OWNED)
    await delete(ctx)  # no exception: the finalizer is released
    assert broker.requests[-1][1].startswith(QUEUE_PATH)
    assert events == []


async def test_delete_of_an_empty_queue_deletes_it(broker: FakeBroker, events: Events) -> None:
    ctx = context(status=OWNED)
    await delete(ctx)
    assert broker.requests[-1] == ("DELETE", QUEUE_PATH + "?if-empty=true")
    assert events == []


async def test_delete_while_unreachable_retries_and_says_so(
    broker: FakeBroker, events: Events, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HUTCH_DELETE_TIMEOUT", "300")
    broker.down = True
    ctx = context(spec={"deleteIfEmpty": False}, status=OWNED)
    with pytest.raises(kopf.TemporaryError) as caught:
        await delete(ctx, runtime=297.0)
    assert caught.value.delay <= 3.0  # never past deleteTimeout
    assert ready(ctx)["reason"] == "DeleteBlocked"
    assert ready(ctx)["observedGeneration"] == GENERATION
    assert events == [("Warning", "DeleteBlocked")]


async def test_a_blocked_connection_secret_delete_names_no_broker_list(
    broker: FakeBroker, events: Events, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 31 item 3: a connectionSecret object has no Broker whose status lists what it
    abandons, so its DeleteBlocked text must not promise one; a brokerRef object's still does."""

    async def secret(namespace: str, name: str) -> tuple[str, str, str, str]:
        return "user", "secret", ENDPOINT, ""

    monkeypatch.setattr(references, "_connection_secret", secret)
    monkeypatch.setenv("HUTCH_DELETE_TIMEOUT", "300")
    broker.down = True
    spec = {"brokerRef": None, "connectionSecret": {"name": "s"}, "deleteIfEmpty": False}
    by_secret = context(spec=spec, status=OWNED)
    by_ref = context(spec={"deleteIfEmpty": False}, status=OWNED)
    for ctx in (by_secret, by_ref):
        with pytest.raises(kopf.TemporaryError):
            await delete(ctx)
        assert ready(ctx)["reason"] == "DeleteBlocked"
    assert "Broker" not in ready(by_secret)["message"], ready(by_secret)["message"]
    assert "DeleteAbandoned Event" in ready(by_secret)["message"]
    assert ready(by_ref)["message"].endswith("listed on its Broker")


async def test_delete_past_the_timeout_abandons_and_lists_the_object(
    broker: FakeBroker, events: Events, monkeypatch: pytest.MonkeyPatch
) -> None:
    listed: list[Any] = []

    async def update(namespace: str, name: str, add: list[Any], remove: set[Any]) -> None:
        listed.append((namespace, name, [item["object"] for item in add]))

    monkeypatch.setenv("HUTCH_DELETE_TIMEOUT", "10")
    monkeypatch.setattr(abandoned, "update", update)
    broker.down = True
    ctx = context(spec={"deleteIfEmpty": False}, status=OWNED)
    await delete(ctx, runtime=11.0)
    assert events == [("Warning", "DeleteAbandoned")]
    assert listed == [(NAMESPACE, "hutch", ["orders"])]


async def test_delete_refused_with_a_4xx_releases_the_finalizer(
    broker: FakeBroker, events: Events
) -> None:
    broker.script[("DELETE", "/api/exchanges/%2F/orders")] = 400
    ctx = context(ops=exchanges.OPS, status=OWNED)
    await delete(ctx)
    assert broker.requests == [("DELETE", "/api/exchanges/%2F/orders")]
    assert events == [("Warning", "DeleteFailed")]


async def test_delete_of_a_never_declared_object_leaves_the_broker_alone(
    broker: FakeBroker, events: Events
) -> None:
    ctx = context(status={"brokerEndpoint": ENDPOINT})
    await delete(ctx)
    assert broker.requests == []
    assert events == [("Warning", "DeleteSkippedNotOwned")]


async def test_never_declared_object_is_released_before_resolving_its_broker(
    broker: FakeBroker, events: Events
) -> None:
    """Ownership is judged from status first: a missing Broker does not matter then."""
    ctx = context(spec={"brokerRef": {"name": "gone"}})
    await delete(ctx)
    assert broker.requests == []
    assert events == [("Warning", "DeleteSkippedNotOwned")]


async def test_retained_object_is_not_deleted(broker: FakeBroker, events: Events) -> None:
    ctx = context(spec={"deletionPolicy": "retain"}, status=OWNED)
    await delete(ctx)
    assert broker.requests == []
    assert events == [("Normal", "Retained")]


async def test_delete_with_a_reserved_name_never_calls_the_broker(
    broker: FakeBroker, events: Events
) -> None:
    ctx = context(name="amq.orders", status=OWNED)
    await delete(ctx)
    assert broker.requests == []


# -- the mapping itself ----------------------------------------------------------


@pytest.mark.parametrize(
    ("error", "permanent", "delay"),
    [
        (errors.SpecError("x"), True, None),
        (errors.BrokerRejectedError("x", status=400), True, None),
        (errors.ArgumentsImmutableError("x"), True, None),
        (errors.NamespaceNotAllowedError("x"), True, None),
        (errors.BrokerNotReadyError("x"), False, 10.0),
        (errors.BrokerNotFoundError("x"), False, 30.0),
    ],
)
def test_fail_maps_each_error_to_one_retry_class(
    events: Events, error: errors.HutchError, permanent: bool, delay: float | None
) -> None:
    ctx = context()
    with pytest.raises((kopf.PermanentError, kopf.TemporaryError)) as caught:
        reconciling.fail(ctx, error, retry=0)
    assert isinstance(caught.value, kopf.PermanentError) is permanent
    assert caught.value.__cause__ is error
    if not permanent:
        assert caught.value.delay == delay
    assert ready(ctx)["reason"] == error.reason
    assert ready(ctx)["observedGeneration"] == GENERATION


@pytest.mark.parametrize(
    ("error", "delays"),
    [
        (errors.BrokerUnavailableError("x"), [5, 10, 20, 40, 80, 160, 300, 300]),
        (errors.DependencyNotFoundError("x"), [1, 2, 4, 8, 15, 15]),
    ],
)
def test_backoff_errors_double_from_their_base_up_to_their_cap(
    error: errors.HutchError, delays: list[float]
) -> None:
    for retry, expected in enumerate(delays):
        delay = reconciling.retry_delay(error, retry)
        assert expected * 0.8 <= delay <= expected * 1.2, (retry, delay)


@pytest.mark.parametrize(
    ("status", "error"),
    [
        (400, errors.BrokerRejectedError),
        (409, errors.BrokerRejectedError),
        (401, errors.AuthenticationFailedError),
        (403, errors.AuthenticationFailedError),
        (404, errors.ObjectNotFoundError),
        (500, errors.BrokerUnavailableError),
        (503, errors.BrokerUnavailableError),
    ],
)
def test_http_status_maps_to_one_operator_error(status: int, error: type[Exception]) -> None:
    request = brokerclient.Request("PUT", QUEUE_PATH)
    with pytest.raises(error):
        brokerclient._outcome(request, status, '{"reason": "no"}', ENDPOINT)


def test_fake_broker_satisfies_the_protocol() -> None:
    client = _protocol_check(FakeBroker())
    assert client.base_url == ENDPOINT
