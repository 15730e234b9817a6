"""A queue's ``memory`` in ``/api/queues`` on both brokers (issue 31, item 3).

Both count what the queue holds in memory, never a sum of body bytes on disk: an empty queue
has structures of its own, and every queued message costs memory besides its body. They
differ in the bodies (``differences`` "queue-memory"): RabbitMQ keeps a body over 64 bytes
outside its queue process's heap, so its figure leaves them out; hutch-broker counts the
resident ones. ``message_bytes`` is the bodies' total on both.
"""

from __future__ import annotations

import time
from typing import Any

from hutch_demo.management import quote
from hutch_testing.sidebyside import Target

COUNT = 2000


def _queue(target: Target, name: str, messages: int) -> dict[str, Any]:
    """The queue's item once the listing counts ``messages`` (RabbitMQ's stats lag)."""
    deadline = time.monotonic() + 30
    while True:
        body = target.api.get(f"/queues/%2F/{quote(name)}").body
        if body.get("messages") == messages and "memory" in body:
            return dict(body)
        assert time.monotonic() < deadline, body
        time.sleep(0.5)


def test_memory_is_what_the_queue_holds_not_its_message_bytes(target: Target) -> None:
    channel = target.channel()
    empty, small, large = target.name("empty"), target.name("small"), target.name("large")
    for name in (empty, small, large):
        channel.queue_declare(name)
    for _ in range(COUNT):
        channel.basic_publish("", small, b"s" * 100)
        channel.basic_publish("", large, b"l" * 8192)
    none, hundreds, kibs = (
        _queue(target, empty, 0),
        _queue(target, small, COUNT),
        _queue(target, large, COUNT),
    )

    # The queue's own structures: an Erlang queue process's heap, which RabbitMQ 3.10.8 has
    # reported at up to 68,200 bytes when idle on a machine at load 10 (its garbage collector
    # had not run yet), far below the messages' bytes either way.
    assert 1024 <= none["memory"] <= 256 * 1024, none
    assert hundreds["message_bytes"] == COUNT * 100
    assert kibs["message_bytes"] == COUNT * 8192
    # Each message costs more than its 100-byte body: entries, not only bytes.
    assert hundreds["memory"] - none["memory"] >= COUNT * 100, hundreds
    bodies_counted = kibs["memory"] >= kibs["message_bytes"]
    assert bodies_counted == target.expect("queue-memory", hutch=True, rabbitmq=False), kibs
