"""The default exchange's publish path: charged, parked, stamped and routed as the general one.

Why: ``publishes.publish_within`` routes a publish to the default exchange without CC/BCC (one
key, at most one queue) without the general route, because that is nearly every publish and
the general route's layers cost throughput (docs/isolation/README.md, "What it cost in
throughput").  These pin that the shortcut changes nothing but speed: the meter is charged the
same steps and never overdrawn, a publish that does not fit still parks, CC/BCC still reach
every queue they name, and message-id stamping still applies.
"""

from __future__ import annotations

from hutch_broker.model import budgets, publishes, routing
from hutch_broker.model.messages import Message
from hutch_broker.model.vhosts import VirtualHost
from hutch_broker.protocol import properties


def message(key: str, **props: object) -> Message:
    raw = properties.encode_properties(**props)
    return Message("", key, raw, b"body")


def test_a_publish_to_an_existing_queue_costs_a_key_and_an_enqueue():
    vhost = VirtualHost("/")
    queue, _ = vhost.declare_queue("q")
    meter = budgets.Meter(100)

    outcome = publishes.publish_within(vhost, vhost.default_exchange, message("q"), 0, meter=meter)

    assert isinstance(outcome, publishes.Published)
    assert outcome.queues == [queue] and queue.ready_count == 1
    assert meter.left == 100 - 1 - publishes.ENQUEUE_STEPS
    # The general route charges the same for the same publish.
    general = budgets.Meter(100)
    routed = routing.route(vhost, vhost.default_exchange, ["q"], message("q"), general)
    assert routed == [queue]
    assert 100 - general.left + publishes.ENQUEUE_STEPS == 100 - meter.left


def test_a_publish_to_no_queue_costs_the_key_and_is_unroutable():
    vhost = VirtualHost("/")
    meter = budgets.Meter(100)

    outcome = publishes.publish_within(
        vhost, vhost.default_exchange, message("missing"), 0, meter=meter
    )

    assert isinstance(outcome, publishes.Published) and not outcome.routed
    assert meter.left == 99
    assert vhost.default_exchange.stats_publish_in == 1
    assert vhost.default_exchange.stats_publish_out == 0


def test_a_publish_that_does_not_fit_parks_and_never_overdraws_the_meter():
    vhost = VirtualHost("/")
    queue, _ = vhost.declare_queue("q")
    meter = budgets.Meter(publishes.ENQUEUE_STEPS)  # one step short

    outcome = publishes.publish_within(vhost, vhost.default_exchange, message("q"), 0, meter=meter)

    assert isinstance(outcome, publishes.PendingPublish)
    assert meter.left >= 0, "a meter is never overdrawn"
    assert queue.ready_count == 0, "not enqueued before its turn"
    while not outcome.advance(budgets.Meter(4)):
        pass
    assert outcome.finish(0).queues == [queue] and queue.ready_count == 1


def test_cc_and_bcc_on_the_default_exchange_reach_every_queue_they_name():
    vhost = VirtualHost("/")
    first, _ = vhost.declare_queue("a")
    second, _ = vhost.declare_queue("b")
    third, _ = vhost.declare_queue("c")
    meter = budgets.Meter(1000)
    sent = message("a", headers={"CC": ["b"], "BCC": ["c"]})

    outcome = publishes.publish_within(vhost, vhost.default_exchange, sent, 0, meter=meter)

    assert isinstance(outcome, publishes.Published)
    assert outcome.queues == [first, second, third]
    assert meter.left == 1000 - 3 - 3 * publishes.ENQUEUE_STEPS
    delivered = next(iter(third.ready_entries())).message
    assert "BCC" not in (delivered.headers() or {})  # EX-4: BCC never reaches a consumer


def test_message_ids_are_stamped_on_the_fast_path_only_where_none_was_sent():
    vhost = VirtualHost("/")
    queue, _ = vhost.declare_queue("q")
    ids = iter(["hutch-1", "hutch-2"])
    meter = budgets.unlimited()

    for sent in (message("q"), message("q", message_id="mine")):
        publishes.publish_within(
            vhost, vhost.default_exchange, sent, 0, meter=meter, message_ids=lambda: next(ids)
        )

    stamped = [
        properties.decode_properties(e.message.raw_properties) for e in queue.ready_entries()
    ]
    assert [p["message_id"] for p in stamped] == ["hutch-1", "mine"]


def test_cc_bcc_and_x_death_are_read_as_before_with_or_without_headers():
    """CC and BCC are looked for only in a message with a headers table (``has_headers``) and
    x-death with one search for ``-death`` first, and only in a message with a headers table
    too (x-death and x-first-death-* are header names): the same queues, BCC stripped, and the
    foreign-deaths flag set whenever a message with headers names x-death in its properties'
    bytes, as before, never without a headers table (where the dead-lettering it steers reads
    no earlier deaths either way: model/deadletter.py)."""
    vhost = VirtualHost("/")
    one, _ = vhost.declare_queue("one")
    two, _ = vhost.declare_queue("two")

    def published(**props: object) -> list[Message]:
        outcome = publishes.publish(vhost, vhost.default_exchange, message("one", **props), 0)
        assert outcome.queues
        taken = [queue.get(0, no_ack=True) for queue in outcome.queues]
        return [entry.message for entry in taken if entry is not None]

    plain = published(message_id="CC", correlation_id="BCC")  # the names, not in headers
    assert [m.has_headers for m in plain] == [False] and one.ready_count == two.ready_count == 0
    assert not plain[0].foreign_deaths
    cc = published(headers={"CC": ["two"]})
    assert len(cc) == 2 and cc[0].has_headers
    bcc = published(headers={"BCC": ["two"], "k": 1})
    assert len(bcc) == 2 and all(m.headers() == {"k": 1} for m in bcc)
    for props in (
        {"headers": {"x-death": []}},
        {"headers": {"x-first-death-reason": "expired"}},
        {"headers": {"k": 1}, "app_id": "a-death-b"},
    ):
        (dead,) = published(**props)
        assert dead.foreign_deaths, props
    for props in (
        {"message_id": "x-death"},
        {"app_id": "a-death-b"},
        {"headers": {"k": 1}, "message_id": "x-deat"},
        {"headers": {"k": 1}, "app_id": "-death"},
        {"headers": {"death": 1}},
    ):
        (alive,) = published(**props)
        assert not alive.foreign_deaths, props
