"""A consumer that stops reading its socket does not throttle publishers (issue 11, item 11).

Flow control pauses a publisher while a queue with consumers backs up, and releases it when
the consumers stall for 200 ms. Without remembering the stall, the next publish throttled
again at once: one stuck consumer held its queue's publisher to 163 msg/s for as long as it
stayed connected. Only the resource alarms may block publishers indefinitely.
"""

import time

import pika
from hutch_broker.dispatch import flow
from hutch_broker.model.messages import Entry, Message
from hutch_broker.model.queues import Consumer, Queue
from hutch_testing.clients import connect

BODY = b"x" * 4096
COUNT = 20_000


def test_a_stuck_consumer_does_not_throttle_the_publisher(hutch_broker):
    stuck = connect(hutch_broker)
    ch = stuck.channel()
    ch.queue_declare("work")
    ch.basic_consume("work", lambda *_: None, auto_ack=False)  # then never reads its socket
    publisher = connect(hutch_broker)
    pub = publisher.channel()
    began = time.monotonic()
    for _ in range(COUNT):
        pub.basic_publish("", "work", BODY, pika.BasicProperties(delivery_mode=1))
    ready = pub.queue_declare("work", passive=True).method.message_count  # a round trip
    elapsed = time.monotonic() - began
    assert ready > 4096, "the backlog never reached the flow-control mark: nothing was tested"
    rate = COUNT / elapsed
    assert rate > 2000, f"{rate:.0f} msg/s: the stuck consumer throttled the publisher"
    stuck.close()


def test_a_slow_but_live_consumer_still_paces_the_publisher():
    """The brake still works where it should: the stall memory ends when deliveries resume."""
    control = flow.FlowControl()
    queue = Queue("q")
    queue.add_consumer(
        Consumer("c", queue, object(), no_ack=False, exclusive=False, prefetch=0)  # type: ignore[arg-type]
    )
    for _ in range(flow.HIGH_WATER + 1):
        queue.restore(Entry(0, Message("", "q", b"", b"")))
    assert control.under_pressure(queue)
    control.stalled[queue] = queue.stats_deliver
    assert not control.under_pressure(queue), "stalled: no brake"
    queue.stats_deliver += 1
    assert control.under_pressure(queue), "it delivers again: the brake is back"
