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
