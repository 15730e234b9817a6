"""The publish path's cost in Python calls per message, pinned at its lowest so far.

Why: each layer on ``basic.publish`` is a few function calls per message, which on one core is
throughput (docs/isolation/README.md, "What it cost in throughput"; docs/bench/profile.md).
Calls are counted, not timed, so this holds on any machine.  History of the bars, in this same
harness (waiting consumer without / with confirms, queued without / with confirms, delivery):
1b98ff0, before the isolation work: 46, 49, 41, 44 and 12.54; the isolation work raised them
to 50, 53, 45, 48 and 12.54; folding the path back brought them to 36, 39, 31, 34 and 11.54;
reading a whole publish in one call (``Connection._publish``), the alarm check read inline and
the deliver's short strings read from their memo inline brought them to 29, 32, 26, 29 and
9.54; a confirm channel registering with the group commit at its first held confirm only
(``Channel.add_confirm``) to 29, 30, 26, 27 and 9.54; the per-message expiration flag read
once, inline, by the publish's ``Message`` (the TTL-2 check and the queue's publish each read
it: ``check_expiration`` and two ``has_expiration`` calls) to 26, 27, 23, 24 and 9.54; the
one-flow work (docs/bench/profile.md, "The one-flow path, call by call": the publish straight
from the session's loop, the vhost, the write permission, the reply-to flag and the delivery
mode read inline, ``_deliver``, ``_settle`` and ``encode_deliver``'s common case inlined) to
15, 16, 14, 15 and 8.57; a queue's only consumer taking its messages in one loop
(``Queue._drain_to``: no choice of consumer and no ``_deliver`` call per message) to 15, 16,
14, 15 and 5.59; the clock read once a read, at its first publish, not for each, to 14, 15,
13, 14 and 5.59; a repeated publish read by one C call from its method frame on
(``contentscan.scan_publish``, no ``_publish`` call) to 13, 14, 12, 13 and 5.59; the queue's
deliveries to its only consumer handed to its channel as one run (``Channel.deliver_from``:
no ``deliver``, ``send_deliver`` or ``has_capacity`` call per delivery, the counters added once)
to 13, 14, 12, 13 and 2.70; a queued message appended to the queue's tail by the deque's own
``append`` and the paging test made only while paging is on (``Queue._push_fresh``, its
``fresh_count`` and ``Level.push_fresh``: three calls a queued publish) to 13, 14, 9, 10 and
2.62; a read's repeated publishes taken as one run (``events.PublishRun``,
``publishing.publish_run``: no ``next_event``, event, ``publish`` or exchange checks a message)
to 10.11, 11.12, 6.11, 7.11 and 2.62 (a run's own calls spread over its messages), the bars
now (with the C extension built: its Python twins are two calls more a publish,
``HUTCH_BROKER_PURE_PYTHON``).  A change that adds a call per message fails here:
either win it back or raise the bar with the reason in this docstring.
"""

from __future__ import annotations

import gc
import sys
from collections.abc import Callable
from types import FrameType
from typing import Any

import pytest
from hutch_testing import inmemory
from hutch_testing.storesession import StoreSession
from pamqp import body, commands, frame, header

MESSAGES = 200
PAYLOAD = b"x" * 1024


class Counted:
    """Python function calls (not C ones) made inside ``with`` blocks.

    The garbage collector is run before and held off inside: a collection that came due in the
    block ran the ``__del__`` methods and weakref callbacks of whatever earlier tests left
    behind (a pika connection, say), and the count then depended on which tests ran first (a
    stream delivery counted over its 13.3-call bar once, in one order).
    """

    def __init__(self) -> None:
        self.calls = 0
        self._previous: Callable[..., Any] | None = None
        self._gc_was_enabled = True

    def _profile(self, _frame: FrameType, event: str, _arg: Any) -> None:
        if event == "call":
            self.calls += 1

    def __enter__(self) -> Counted:
        self._gc_was_enabled = gc.isenabled()
        gc.collect()
        gc.disable()
        self._previous = sys.getprofile()
        sys.setprofile(self._profile)
        return self

    def __exit__(self, *_: object) -> None:
        sys.setprofile(self._previous)
        if self._gc_was_enabled:
            gc.enable()


class Client(StoreSession):
    """One in-memory connection with no message store: channel 1 publishes, channel 2 consumes
    from queue "q"."""

    def __init__(self, *, confirms: bool) -> None:
        super().__init__(data_dir=None)
        if confirms:
            self.send(commands.Confirm.Select())
        self.send(commands.Queue.Declare(queue="q"))
        self.send(commands.Basic.Qos(prefetch_count=1000), 2)
        properties = commands.Basic.Properties(delivery_mode=1, message_id="m")
        self.one = (
            frame.marshal(commands.Basic.Publish(exchange="", routing_key="q"), 1)
            + frame.marshal(header.ContentHeader(0, len(PAYLOAD), properties), 1)
            + frame.marshal(body.ContentBody(PAYLOAD), 1)
        )

    def consume(self) -> None:
        self.send(commands.Basic.Consume(queue="q", consumer_tag="c"), 2)

    def replies(self) -> list[object]:
        self.context.commits.release()  # the server's end of turn: the confirms go out
        return inmemory.decode_frames(b"".join(self.proto.data_to_send()))


def check_replies(client: Client, *, confirms: bool) -> None:
    replies = client.replies()
    deliveries = [reply for reply in replies if isinstance(reply, commands.Basic.Deliver)]
    assert len(deliveries) == MESSAGES + 1, "each message was handed to the consumer"
    assert confirms == any(isinstance(reply, commands.Basic.Ack) for reply in replies)


@pytest.mark.parametrize(("confirms", "bar"), [(False, 10.11), (True, 11.12)])
def test_a_publish_to_a_waiting_consumer_makes_no_more_calls_than_pinned(
    confirms: bool, bar: float
) -> None:
    client = Client(confirms=confirms)
    client.consume()
    client.session.handle_data(client.one)  # warm: first-use paths (caches, lazy objects)

    with Counted() as counted:
        client.session.handle_data(client.one * MESSAGES)

    check_replies(client, confirms=confirms)
    assert counted.calls / MESSAGES <= bar


@pytest.mark.parametrize(("confirms", "bar"), [(False, 6.11), (True, 7.11)])
def test_a_queued_publish_and_its_delivery_make_no_more_calls_than_pinned(
    confirms: bool, bar: float
) -> None:
    client = Client(confirms=confirms)
    client.session.handle_data(client.one)  # warm

    with Counted() as published:
        client.session.handle_data(client.one * MESSAGES)
    with Counted() as delivered:
        client.consume()  # the queue drains to the new consumer

    check_replies(client, confirms=confirms)
    assert published.calls / MESSAGES <= bar
    # 2.62: the head's pop (two calls) and its frames (one C call) a delivery, plus the run's own
    assert delivered.calls / (MESSAGES + 1) <= 2.62


def test_a_publish_queued_behind_a_full_consumer_makes_no_more_calls_than_one_with_none() -> None:
    """A consumer without room costs a queued publish nothing: the last scan found it full and
    nothing gave it room since (model/consumers.py), so the publish does not drain the queue
    again. In scenario 1 of the benchmark every publish is queued behind a consumer whose
    connection's output slice is full until the turn's end; the drain, rescan, choice and
    capacity check it made for each were 4 calls (18 against the queued bar, then 14; now 6)
    and 5 % of the broker's CPU. Room that appears later drains the queue: an ack, then a new consumer."""
    client = Client(confirms=False)
    client.send(commands.Basic.Qos(prefetch_count=1), 2)
    client.consume()
    client.session.handle_data(client.one)  # delivered: the consumer is full
    client.replies()
    client.session.handle_data(client.one)  # warm: the queued path's first use

    with Counted() as published:
        client.session.handle_data(client.one * MESSAGES)

    assert not [r for r in client.replies() if isinstance(r, commands.Basic.Deliver)]
    assert published.calls / MESSAGES <= 6.11  # the queued bar
    ack(client, 1)
    assert [r.delivery_tag for r in client.replies() if isinstance(r, commands.Basic.Deliver)] == [
        2
    ]
    client.send(commands.Basic.Qos(prefetch_count=1000), 2)
    client.send(commands.Basic.Consume(queue="q", consumer_tag="c2"), 2)
    delivered = [r for r in client.replies() if isinstance(r, commands.Basic.Deliver)]
    assert [r.delivery_tag for r in delivered] == list(range(3, MESSAGES + 3))
    assert {r.consumer_tag for r in delivered} == {"c2"}


class Lines(Counted):
    """Python lines executed (and calls made) inside ``with`` blocks: per-item work in a loop
    shows here even when it calls nothing."""

    def __init__(self) -> None:
        super().__init__()
        self.lines = 0

    def _trace(self, _frame: FrameType, event: str, _arg: Any) -> Any:
        if event == "call":
            self.calls += 1
        elif event == "line":
            self.lines += 1
        return self._trace

    def __enter__(self) -> Lines:
        self._previous = sys.gettrace()
        sys.settrace(self._trace)
        return self

    def __exit__(self, *_: object) -> None:
        sys.settrace(self._previous)


def delivered(client: Client) -> None:
    """The consumer has every message: MESSAGES deliveries on channel 2, tags 1 to MESSAGES."""
    client.consume()
    client.session.handle_data(client.one * MESSAGES)
    client.replies()


def ack(client: Client, tag: int) -> None:
    client.send(commands.Basic.Ack(delivery_tag=tag, multiple=True), 2)


# Pinned per acknowledged message, in calls and lines (sys.settrace's counts, which include the
# ack's own fixed cost spread over the 200 or 100 messages it settles). Before the ack's pass
# over its deliveries was folded into one loop (take_unacked popped each tag, then _release
# and the settle loop each walked the list): 2.19 calls and 16.85 lines for the newest tag,
# 2.38 and 17.70 for one in the middle. Now the newest tag takes the whole list in one C call:
# 2.19 and 11.87; a tag in the middle 2.37 and 16.73. Summing the held bodies in C inside
# take_unacked, the one place that gives them back (before, settle summed them in its loop):
# 2.19 and 10.87, 2.37 and 15.73. ``Queue._forget`` called only for an entry with a store
# record (its own test, read inline): 1.19 and 9.87, 1.37 and 14.73, the bars now. The call a
# message is the queue's (Queue.settle).
@pytest.mark.parametrize(
    ("newest", "calls_bar", "lines_bar"), [(True, 1.2, 9.9), (False, 1.4, 14.8)]
)
def test_a_multiple_ack_does_no_more_python_work_per_message_than_pinned(
    newest: bool, calls_bar: float, lines_bar: float
) -> None:
    client = Client(confirms=False)
    delivered(client)
    channel = client.session.channels[2]
    held = client.session.held_bytes
    tag = MESSAGES if newest else MESSAGES // 2
    with Lines() as counted:
        ack(client, tag)

    assert list(channel.unacked) == list(range(tag + 1, MESSAGES + 1))
    (consumer,) = channel.consumers.values()
    assert consumer.unacked == MESSAGES - tag
    assert client.session.held_bytes == held - tag * len(PAYLOAD)
    assert counted.calls / tag <= calls_bar
    assert counted.lines / tag <= lines_bar


def test_a_single_ack_does_no_more_python_work_than_pinned() -> None:
    """One ``basic.ack`` a message, from the bytes in to the queue's drain: 24 calls and 128
    lines, the same before and after the held bytes were given back in one place; 23 and 126
    since ``Queue._forget`` is called only for an entry with a store record; 23 and 141 since
    the connection tries a hot channel's repeat publish first (``contentscan.scan_publish``):
    this harness publishes on the acking connection, so each ack's read loads that call's
    arguments (15 lines) for one C call that returns at the frame's first bytes (a connection
    that only consumes has no hot channel and pays nothing); 23 and 142 since the session's loop
    asks whether an event is a run of publishes (``events.PublishRun``) before the rest."""
    client = Client(confirms=False)
    delivered(client)
    acks = [frame.marshal(commands.Basic.Ack(delivery_tag=tag), 2) for tag in range(1, 101)]
    with Lines() as counted:
        for data in acks:
            client.session.handle_data(data)

    assert list(client.session.channels[2].unacked) == list(range(101, MESSAGES + 1))
    assert client.session.held_bytes == (MESSAGES - 100) * len(PAYLOAD)
    assert counted.calls / len(acks) <= 23.1
    assert counted.lines / len(acks) <= 142.1


def test_acks_of_the_newest_tag_after_gaps_settle_exactly_what_is_left() -> None:
    client = Client(confirms=False)
    delivered(client)
    channel = client.session.channels[2]
    client.send(commands.Basic.Ack(delivery_tag=5, multiple=False), 2)
    ack(client, 3)  # 1..3
    assert list(channel.unacked) == [4, *range(6, MESSAGES + 1)]
    ack(client, MESSAGES)  # 4, 6.. the newest: whatever is left, in one step
    assert not channel.unacked
    assert client.session.held_bytes == 0
    (consumer,) = channel.consumers.values()
    assert consumer.unacked == 0
    ack(client, 5)  # settled already: 406 closes the channel, as for any unknown tag
    closes = [r for r in client.replies() if isinstance(r, commands.Channel.Close)]
    assert [close.reply_code for close in closes] == [406]
