"""A queue's run of deliveries to its only consumer (``Channel.deliver_from``) is the same as
the same deliveries made one at a time.

Why: a classic queue with one acking consumer hands its channel a run in one call, which
encodes the run in one protocol call (``Connection.send_deliver_entries``) and adds the
channel's, the session's and the queue's counters once (docs/bench/profile.md). A queue whose
messages may expire still delivers one at a time (``Channel.deliver`` after
``has_capacity``), so the same session, queue and traffic with the queue marked as one that
may expire (no message does) gives the rule the run must follow: the bytes on the wire, the
tags, what the channel holds unacked, the session's output slice and held bytes, and every
counter, after each step of a consumer's life (consume, requeue, acks, the next turn).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hutch_testing.storesession import StoreSession
from pamqp import body, commands, frame, header

FRAME_MAX = 131072  # inmemory.handshake_frames' tune-ok

CASES: dict[str, dict[str, Any]] = {
    "plain": {"bodies": [100] * 30},
    "consumer prefetch": {"bodies": [100] * 30, "prefetch": 7},
    "channel prefetch": {"bodies": [100] * 30, "prefetch": 5, "global": True},
    "both prefetches": {"bodies": [100] * 30, "prefetch": 4, "channel_prefetch": 6},
    "output slice fills": {"bodies": [1500] * 30, "output_slice": 9000},
    "held bytes fill": {"bodies": [1500] * 30, "held_budget": 7000},
    "stored bodies dropped": {"bodies": [5000] * 12 + [100] * 6, "persistent": True},
    "empty and multi-frame": {"bodies": [0, 10, 200_000, 0, 3 * FRAME_MAX, 5] * 3},
}


class Client(StoreSession):
    def publish(self, payload: bytes, *, persistent: bool) -> None:
        properties = commands.Basic.Properties(delivery_mode=2 if persistent else None)
        data = frame.marshal(commands.Basic.Publish(exchange="", routing_key="q"), 1)
        data += frame.marshal(header.ContentHeader(0, len(payload), properties), 1)
        for start in range(0, len(payload), FRAME_MAX - 8):
            data += frame.marshal(body.ContentBody(payload[start : start + FRAME_MAX - 8]), 1)
        self.session.handle_data(data)

    def turn_ends(self) -> bytes:
        """What the loop turn's end does for the session: write out, then room again."""
        written = b"".join(self.proto.data_to_send())
        session = self.session
        session.output_pending = 0
        session.writable = True
        session.resume_deliveries(self.context.clock())
        return written


def snapshot(client: Client, written: bytes) -> dict[str, Any]:
    session = client.session
    channel = session.channels[2]
    queue = client.context.broker.vhosts["/"].queues["q"]
    (consumer,) = queue.consumers
    stats = client.context.stats
    return {
        "written": written + b"".join(client.proto.data_to_send()),
        "next_tag": channel.next_delivery_tag,
        "unacked": [
            (tag, item[1].message.body[:4], len(item[1].message.body), item[1].redelivered)
            for tag, item in channel.unacked.items()
        ],
        "session": (session.output_pending, session.writable, session.held_bytes),
        "stats": (stats.delivers, dict(stats.deliveries), stats.redelivers),
        "queue": (
            queue.ready_count,
            queue.ready_bytes,
            queue.unacked_count,
            queue.unacked_bytes,
            queue.stats_deliver,
            dict(queue.stats_deliveries),
            queue.stats_redeliver,
            queue.consumers.cursor,
        ),
        "consumer": consumer.unacked,
    }


def life(data_dir: Path, case: dict[str, Any], *, one_at_a_time: bool) -> list[dict[str, Any]]:
    client = Client(data_dir if case.get("persistent") else None)
    client.send(commands.Queue.Declare(queue="q", durable=bool(case.get("persistent"))))
    queue = client.context.broker.vhosts["/"].queues["q"]
    queue.may_expire = one_at_a_time  # no message expires: only the delivery loop differs
    for n, size in enumerate(case["bodies"]):
        payload = (b"%04d" % n + bytes(range(256)) * (size // 256 + 1))[:size]
        client.publish(payload, persistent=bool(case.get("persistent")))
    client.proto.data_to_send()
    session = client.session
    if "output_slice" in case:
        session.output_slice = case["output_slice"]
    if "held_budget" in case:
        session.held_budget = case["held_budget"]
    if "channel_prefetch" in case:
        client.send(commands.Basic.Qos(prefetch_count=case["channel_prefetch"], global_=True), 2)
    if "prefetch" in case:
        qos = commands.Basic.Qos(prefetch_count=case["prefetch"], global_=case.get("global", False))
        client.send(qos, 2)
    client.proto.data_to_send()
    client.send(commands.Basic.Consume(queue="q", consumer_tag="c"), 2)
    steps = [snapshot(client, b"")]
    # Two of the first deliveries back to the queue: redelivered first, at the head.
    for tag in (2, 3):
        client.send(commands.Basic.Reject(delivery_tag=tag, requeue=True), 2)
    steps.append(snapshot(client, client.turn_ends()))
    for _ in range(40):  # everything outstanding acked, the turn ends, the next run goes
        channel = session.channels[2]
        if not channel.unacked and not queue.ready_count:
            break
        if channel.unacked:
            newest = next(reversed(channel.unacked))
            client.send(commands.Basic.Ack(delivery_tag=newest, multiple=True), 2)
        steps.append(snapshot(client, client.turn_ends()))
    return steps


@pytest.mark.parametrize("name", list(CASES))
def test_a_run_is_the_deliveries_one_at_a_time(tmp_path, name):
    case = CASES[name]
    run = life(tmp_path / "run", case, one_at_a_time=False)
    assert run == life(tmp_path / "one", case, one_at_a_time=True)
    last = run[-1]
    assert last["queue"][0] == 0 and not last["unacked"], "everything was delivered and acked"
    delivered = last["stats"][0]
    assert delivered == len(case["bodies"]) + 2, "each message once, the two requeued twice"
    assert last["stats"][2] == 2 and last["queue"][6] == 2  # the two redeliveries
    first = run[0]
    room = min(case.get("prefetch", 99), case.get("channel_prefetch", 99), len(case["bodies"]))
    if "output_slice" in case or "held_budget" in case:
        assert len(first["unacked"]) < room, "the run stopped where the bytes ran out"
    else:
        assert len(first["unacked"]) == room


def test_a_stored_body_is_dropped_once_encoded(tmp_path):
    """A body the store holds (and big enough) is not kept for redelivery: the frame has it."""
    steps = life(tmp_path, CASES["stored bodies dropped"], one_at_a_time=False)
    first = steps[0]
    held = [size for _, _, size, _ in first["unacked"]]
    assert held[:12] == [0] * 12 and held[12:] == [100] * 6
    assert first["session"][2] == 600, "only the small bodies count as held"
    assert first["written"].count(b"0011") == 1  # the twelfth body went out whole
