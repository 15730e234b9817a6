"""The real rabbitmqadmin (served by RabbitMQ 3.10.8) against both brokers, side by side.

One scenario runs on the reference and on the module's hutch-broker: declare, publish and get
through rabbitmqadmin, a pika consumer, then ``list queues/consumers/exchanges`` and ``show
overview``. The outputs must have the same shape (columns, flattened keys) and the same values
wherever the value is not a port, a node name or a version. Both sides are shared, as in every
side-by-side module (the test's objects under its name prefix, its own vhost); the monitoring
check holds hutch-broker's broker-wide totals to its one queue's, so it has a fresh broker.
"""

from collections.abc import Iterator

import pytest
from hutch_demo.management import quote
from hutch_demo.waiting import wait_for
from hutch_testing import rabbitmqadmin
from hutch_testing.differences import HUTCH, RABBITMQ
from hutch_testing.sidebyside import Target

ERLANG_INTERNALS = {
    "backing_queue_status",
    "garbage_collection",
    "reductions",
    "reductions_details",
}
# q's counters RabbitMQ shows when it keeps its channels' statistics (see _scenario)
COUNTED = {"publish", "get"}


def _both(rabbitmq, hutch, request) -> Iterator[dict[str, Target]]:
    both = {
        RABBITMQ: Target(RABBITMQ, rabbitmq, request.node.name),
        HUTCH: Target(HUTCH, hutch, request.node.name),
    }
    yield both
    for side in both.values():
        side.cleanup()
        side.api.delete(f"/vhosts/{quote(side.name('vh'))}")


@pytest.fixture
def sides(rabbitmq, module_hutch, request) -> Iterator[dict[str, Target]]:
    """The session's reference node and the module's hutch-broker."""
    yield from _both(rabbitmq, module_hutch, request)


@pytest.fixture
def fresh_sides(rabbitmq, hutch_broker, request) -> Iterator[dict[str, Target]]:
    """The session's reference node and a fresh hutch-broker: its totals are the test's."""
    yield from _both(rabbitmq, hutch_broker, request)


@pytest.fixture
def admins(rabbitmq, sides) -> dict[str, rabbitmqadmin.Admin]:
    script = rabbitmqadmin.fetch(rabbitmq)
    return {kind: rabbitmqadmin.Admin(script, side.broker) for kind, side in sides.items()}


def _flat_keys(item: dict, prefix: str = "") -> set[str]:
    """Keys as rabbitmqadmin flattens them into columns (``channel_details.name``)."""
    keys = set()
    for key, value in item.items():
        if isinstance(value, dict) and value:
            keys |= _flat_keys(value, f"{prefix}{key}.")
        else:
            keys.add(prefix + key)
    return keys


def _unprefixed(rows: list[list[str]], side: Target) -> list[list[str]]:
    """Rows with the side's private name prefix cut, so both brokers' rows compare equal."""
    return [[cell.replace(side.prefix, "") for cell in row] for row in rows]


def _mine(items: list[dict], side: Target) -> list[dict]:
    return [item for item in items if item.get("name", "").startswith(side.prefix)]


def _own_exchanges(admin: rabbitmqadmin.Admin, side: Target) -> list[list[str]]:
    """``list exchanges`` (name, type) of vhost ``/``: the defaults and the side's own. The
    shared reference node also holds what earlier tests left (Celery's exchanges, other
    vhosts with their own default exchanges), and rabbitmqadmin lists every vhost's."""
    header, *items = admin.tsv("list", "exchanges", "vhost", "name", "type")
    assert header == ["vhost", "name", "type"], header
    mine = [row[1:] for row in items if row[0] == "/"
            and (row[1] == "" or row[1].startswith(("amq.", side.prefix)))]  # fmt: skip
    return [["name", "type"], *mine]


def _own_vhost(side: Target) -> str:
    """A vhost of the side's own for its consumer: ``list consumers`` prints the union of every
    listed consumer's keys as its columns, and the shared reference node lists earlier tests'
    consumers in "/" for a while after they closed (3.10.8 keeps a stream consumer whose
    connection it closed listed for good), so the columns would depend on what ran before."""
    vhost = side.name("vh")
    assert side.api.put(f"/vhosts/{quote(vhost)}", {}).status == 201
    everything = {"configure": ".*", "write": ".*", "read": ".*"}
    assert side.api.put(f"/permissions/{quote(vhost)}/guest", everything).ok
    return vhost


def _scenario(side: Target, admin: rabbitmqadmin.Admin) -> dict:
    """The same steps on one broker; returns what rabbitmqadmin printed."""
    q, idle = side.name("q"), side.name("idle")
    vhost = _own_vhost(side)
    out = {
        "declare": admin.run("declare", "queue", f"name={q}", "durable=true"),
        "publish": [
            admin.run("publish", f"routing_key={q}", f"payload=m{index}") for index in range(3)
        ],
        "get": _unprefixed(
            admin.tsv("get", f"queue={q}", "count=2", "ackmode=ack_requeue_true"), side
        ),
    }
    admin.run(f"--vhost={vhost}", "declare", "queue", f"name={idle}", "durable=false")
    channel = side.connect(vhost=vhost).channel()
    channel.basic_qos(prefetch_count=7)
    channel.basic_consume(
        idle, lambda *_: None, consumer_tag=side.name("tag"), arguments={"x-priority": 3}
    )

    def listing() -> list[dict]:
        return sorted(_mine(admin.json("list", "queues"), side), key=lambda item: item["name"])

    def settled(queues: list[dict]) -> bool:
        # idle_since too: 3.10.8 adds it once each queue process has gone idle, a beat later;
        # and the consumer: "idle" may have gone idle (and emitted) before it was consumed from
        return (
            [queue.get("messages") for queue in queues] == [0, 3]  # idle, q
            and [queue.get("consumers") for queue in queues] == [1, 0]
            and all("idle_since" in queue for queue in queues)
        )

    try:  # RabbitMQ's stats arrive about 5 s after the publishes
        out["queues"] = wait_for(
            listing,
            # and q's publish and get counts, which 3.10.8 takes from the publishing and the
            # getting channels' own stats, emitted apart from the queue's (under load, a round
            # after its counts), each on its own
            lambda queues: settled(queues) and set(queues[1].get("message_stats", {})) >= COUNTED,
            timeout=20,
            what="queue stats through rabbitmqadmin",
        )
        out["stats_lost"] = False
    except AssertionError:
        if side.kind != RABBITMQ:
            raise
        # 3.10.8 can lose them for good: the management API's channel for each publish and
        # get closes at once, and when the node's core-metrics collection of dead channels
        # (every 120 s) runs before the statistics collector's next round (every 5 s), the
        # channel's counts are deleted unread. 4 rounds went by: the reference lost them.
        out["queues"] = wait_for(listing, settled, timeout=20, what="queue counts")
        # either channel's: a CI run saw the publish count kept and the get counts lost
        out["stats_lost"] = not set(out["queues"][1].get("message_stats", {})) >= COUNTED
    out["queue_columns"] = admin.tsv("list", "queues")[0]
    out["consumers"] = wait_for(
        lambda: admin.json(f"--vhost={vhost}", "list", "consumers"),
        lambda found: [c["queue"]["name"] for c in found] == [idle],
        timeout=20,
        what="the consumer through rabbitmqadmin",
    )
    out["consumer_columns"] = admin.tsv(f"--vhost={vhost}", "list", "consumers")[0]
    out["exchange_columns"] = admin.tsv("list", "exchanges")[0]
    out["exchanges"] = _unprefixed(_own_exchanges(admin, side), side)
    qq = side.name("qq")
    out["declare_quorum"] = admin.run("declare", "queue", f"name={qq}", "queue_type=quorum")
    header, *rows = _unprefixed(admin.tsv("list", "queues", "name", "type", "durable"), side)
    out["types"] = [header, *sorted(row for row in rows if row[0] in ("q", "idle", "qq"))]
    out["overview"] = admin.json("show", "overview")
    out["overview_columns"] = admin.tsv("show", "overview")[0]
    return out


def test_rabbitmqadmin_sees_the_same_shapes_on_both_brokers(sides, admins):
    seen = {kind: _scenario(sides[kind], admins[kind]) for kind in (RABBITMQ, HUTCH)}
    reference, hutch = seen[RABBITMQ], seen[HUTCH]

    assert hutch["declare"] == reference["declare"] == "queue declared\n"
    assert hutch["publish"] == reference["publish"] == ["Message published\n"] * 3
    assert hutch["get"] == reference["get"]  # header and rows: routing key, payload, counts
    payload = hutch["get"][0].index("payload")
    assert [row[payload] for row in hutch["get"][1:]] == ["m0", "m1"]

    assert hutch["declare_quorum"] == reference["declare_quorum"] == "queue declared\n"
    assert (
        hutch["types"]
        == reference["types"]
        == [
            ["name", "type", "durable"],
            ["idle", "classic", "False"],
            ["q", "classic", "True"],
            ["qq", "quorum", "True"],
        ]
    )
    assert hutch["queue_columns"] == reference["queue_columns"] == ["name", "messages"]
    for theirs, ours in zip(reference["queues"], hutch["queues"], strict=True):
        internals = {key for key in _flat_keys(theirs) if key.split(".")[0] in ERLANG_INTERNALS}
        if reference["stats_lost"] and ours["name"].endswith("-q"):
            # The reference dropped q's channel statistics (see _scenario): compare the rest,
            # and hold ours to the counters RabbitMQ shows when it keeps them.
            stats = {key for key in _flat_keys(ours) if key.startswith("message_stats.")}
            assert {f"message_stats.{name}" for name in COUNTED} <= stats, stats
            internals |= {key for key in _flat_keys(theirs) if key.startswith("message_stats.")}
            assert _flat_keys(ours) - stats == _flat_keys(theirs) - internals
        else:
            assert _flat_keys(ours) == _flat_keys(theirs) - internals
        for key in ("messages_ready", "messages_unacknowledged", "consumers", "type", "state"):
            assert ours[key] == theirs[key], key

    [theirs], [ours] = reference["consumers"], hutch["consumers"]
    assert _flat_keys(ours) == _flat_keys(theirs)
    assert hutch["consumer_columns"] == reference["consumer_columns"]
    hidden = {"channel_details", "queue"}  # names and ports, compared below
    assert {k: v for k, v in ours.items() if k not in hidden} == {
        k: v for k, v in theirs.items() if k not in hidden
    } | {"consumer_tag": sides[HUTCH].name("tag")}
    assert ours["queue"] == {"name": sides[HUTCH].name("idle"), "vhost": sides[HUTCH].name("vh")}
    assert ours["channel_details"]["number"] == theirs["channel_details"]["number"]

    assert hutch["exchange_columns"] == reference["exchange_columns"] == ["name", "type"]
    assert sorted(hutch["exchanges"][1:]) == sorted(reference["exchanges"][1:])

    assert hutch["overview_columns"] == reference["overview_columns"]
    assert _flat_keys(hutch["overview"][0]) == _flat_keys(reference["overview"][0])


def test_api_consumers_per_vhost_and_missing_vhost(target):
    """``/api/consumers/{vhost}`` lists that vhost's consumers; a missing vhost is a 404."""
    channel = target.channel(confirm=False)
    queue = target.name("q")
    channel.queue_declare(queue, exclusive=True)
    channel.basic_consume(queue, lambda *_: None, auto_ack=True, consumer_tag=target.name("c"))
    found = wait_for(
        lambda: [c for c in target.api.get("/consumers/%2F").body if c["queue"]["name"] == queue],
        lambda consumers: len(consumers) == 1,
        timeout=20,
        what="the consumer in /api/consumers/%2F",
    )
    assert (found[0]["ack_required"], found[0]["exclusive"]) == (False, False)
    assert found[0]["arguments"] == {}
    assert found[0]["consumer_tag"] == target.name("c")
    missing = target.api.get("/consumers/no-such-vhost")
    assert (missing.status, missing.body) == (
        404,
        {"error": "Object Not Found", "reason": "Not Found"},
    )


def _monitoring_view(side: Target) -> dict:
    """Traffic of every kind the overview counts, then what a monitoring scrape reads."""
    channel = side.channel()
    q = side.name("m")
    channel.queue_declare(q)
    for index in range(3):
        channel.basic_publish("", q, f"m{index}".encode())
    channel.basic_publish("", side.name("nowhere"), b"x", mandatory=False)
    method, _, _ = channel.basic_get(q)
    channel.basic_nack(method.delivery_tag, requeue=True)
    channel.basic_get(q, auto_ack=True)
    channel.basic_consume(q, lambda ch, m, p, b: ch.basic_ack(m.delivery_tag))
    wait_for(
        lambda: side.connection.process_data_events(0.05) or side.api.get("/overview").body,
        lambda body: body.get("message_stats", {}).get("ack", 0) >= 2,
        timeout=30,
        what="overview counters after the traffic",
    )
    queue = wait_for(  # 3.10.8 emits a queue's message_stats apart from the overview's
        lambda: side.connection.process_data_events(0.05) or side.api.queue(q),
        # and its message counts: they come in yet another stats event, which may predate the
        # acks (the counts asserted below are those after them); its publish count comes from
        # the channel's queue-exchange stats, in a collection round of their own
        lambda body: (
            body.get("message_stats", {}).get("ack", 0) >= 2
            and body.get("message_stats", {}).get("publish", 0) >= 3
            and body.get("messages") == 0
        ),
        timeout=30,
        what="the queue's counters after the traffic",
    )
    return {
        "overview": side.api.get("/overview").body,
        "nodes": side.api.get("/nodes").body,
        "queue": queue,
    }


def test_monitoring_fields_of_overview_nodes_and_queues(fresh_sides):
    """Every key a scraper may read on 3.10.8 (flattened, as exporters walk them) is there."""
    reference, hutch = (_monitoring_view(fresh_sides[kind]) for kind in (RABBITMQ, HUTCH))

    def missing(kind: str, skip: tuple[str, ...] = ()) -> set[str]:
        theirs = _flat_keys(reference[kind] if kind != "nodes" else reference[kind][0])
        ours = _flat_keys(hutch[kind] if kind != "nodes" else hutch[kind][0])
        return {key for key in theirs - ours if not key.startswith(skip)}

    assert missing("overview") == set()
    assert missing("queue", tuple(ERLANG_INTERNALS)) == set()
    assert missing("nodes") == set(), " ".join(sorted(missing("nodes")))
    # The shared reference node's totals also hold what earlier tests left in their queues;
    # the fresh hutch-broker has this test's queue only, so its totals are that queue's.
    for key in ("messages", "messages_ready", "messages_unacknowledged"):
        assert hutch["overview"]["queue_totals"][key] == reference["queue"][key] == 0, key
    for key in ("publish", "ack", "deliver_get", "redeliver", "get", "deliver"):
        assert hutch["queue"]["message_stats"][key] == reference["queue"]["message_stats"][key], key
    # The shared reference node's overview also counts earlier tests, so Hutch's broker-wide
    # counters are held to the reference queue's: all delivery traffic went through that queue.
    split = ("deliver", "deliver_no_ack", "get", "get_no_ack", "deliver_get", "redeliver", "ack")
    overview = hutch["overview"]["message_stats"]
    assert {key: overview[key] for key in split} == {
        key: reference["queue"]["message_stats"][key] for key in split
    }
    assert overview["publish"] == reference["queue"]["message_stats"]["publish"] + 1
    assert overview["drop_unroutable"] == 1  # the publish to no queue
