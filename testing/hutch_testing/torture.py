"""Crash cycles: kill -9 or SIGTERM at a random moment while every consumer pattern runs.

Why it exists: hutch-broker's promise is that a confirmed persistent message in a durable
queue survives every restart, and the one kill -9 test that existed published with no
consumer attached, so it could not see a confirm released for a message delivered straight
to a consumer and never written. Each cycle here runs, at the same time, publishers in
confirm mode with many publishes in flight (and one in tx mode), and one durable queue per
consumer pattern:

- ``none``: no consumer; ``ack1``: ack each; ``batch``: ack 50 at a time (multiple=true);
- ``chclose`` / ``connclose``: consumers that close their channel or connection mid-stream;
- ``nack``: nack with requeue, then reject without requeue into a dead-letter queue;
- ``ttl``: a 30 ms message TTL that dead-letters; ``ring``: max-length 50, drop-head;
- ``overflow``: max-length 50, drop-head, dead-lettering what it drops;
- ``quorum``: a quorum queue with delivery-limit 1 whose consumer always nacks with requeue,
  so each message is re-written once (its delivery count) and then dead-lettered;
- ``fan.a``, ``fan.b``, ``fan.c``: a fanout exchange into three queues, one consumed;
- ``stream``, ``stream.ret``: stream queues (the second with retention over small segments)
  read by consumers at random offsets (``first``, ``next``, numeric, timestamp) that ack as
  they go and close their channels; checked by offset after each restart
  (``torture_streams``: every confirmed message at its offset, offsets dense and never reused,
  retention by whole segments only).

Every dead-lettering is a move between two queue logs (the copy appended in one, the
original acked in the other), so four patterns exercise the group commit's ordering.

The broker is then killed (SIGKILL or SIGTERM, chosen at random, at a random moment after
the first confirm) and restarted, every queue is drained and the ledger is checked: every
confirmed message is in its queue, or was acked, or left by a documented route
(dead-lettered into its dead-letter queue, dropped by the ring's length limit); no queue
holds a message twice, except where a crash can leave a move half done (a dead-letter queue,
or a quorum queue's return: "moved twice", counted apart and documented in
docs/broker-differences.md); every body's checksum holds.
``run`` is the library; ``tests/broker/torture`` runs a bounded form in CI and
``python -m hutch_testing.torture --cycles 100`` the long form, which writes its figures.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import random
import signal
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Coroutine
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import aio_pika
from aio_pika.abc import AbstractConnection
from hutch_demo import processes

from hutch_testing import brokers, clients, torture_streams
from hutch_testing.torture_streams import STREAMS

CONSUMED = ("ack1", "batch", "chclose", "connclose", "nack", "quorum")
QUEUES = ("none", *CONSUMED, "ttl", "ring", "overflow", "fan.a", "fan.b", "fan.c")
DEAD_LETTERS = {
    "nack": "dead.nack",
    "ttl": "dead.ttl",
    "overflow": "dead.overflow",
    "quorum": "dead.quorum",
}
DEAD = tuple(DEAD_LETTERS.values())
MAY_DROP = {"ring"}  # the length limit drops the head: a confirmed message may go that way
MOVED_WITHIN = {*DEAD, "quorum"}  # where a crash may leave a moved message twice (``check``)


def body_for(message_id: str) -> bytes:
    payload = (message_id.encode() + b"/") * 40
    digest = hashlib.sha256(payload).hexdigest().encode()
    return message_id.encode() + b":" + digest + b":" + payload


def parse(body: bytes) -> str:
    """The message id of an intact body; raises AssertionError for a corrupt one."""
    message_id, digest, payload = body.split(b":", 2)
    if hashlib.sha256(payload).hexdigest().encode() != digest:
        raise AssertionError(f"corrupt body served: {body[:60]!r}")
    return message_id.decode()


@dataclass
class Ledger:
    """What the clients know of one cycle: confirmed per queue, and acks sent per queue."""

    confirmed: dict[str, set[str]] = field(default_factory=dict)
    acked: dict[str, set[str]] = field(default_factory=dict)
    began: float = field(default_factory=time.monotonic)
    first_confirm_s: float | None = None  # after ``began``
    killed_s: float | None = None
    any_confirm: asyncio.Event = field(default_factory=asyncio.Event)
    streams: torture_streams.Seen = field(default_factory=torture_streams.Seen)

    def confirm(self, queues: tuple[str, ...], message_id: str) -> None:
        for queue in queues:
            self.confirmed.setdefault(queue, set()).add(message_id)
        if self.first_confirm_s is None:
            self.first_confirm_s = time.monotonic() - self.began
            self.any_confirm.set()

    def ack(self, queue: str, message_ids: list[str]) -> None:
        self.acked.setdefault(queue, set()).update(message_ids)


@dataclass
class CycleResult:
    cycle: int
    signal: str
    ran_s: float
    confirmed: int
    transacted: int  # of ``confirmed``, committed by the tx publisher
    acked: int
    recovered: int
    lost: list[str]
    duplicated: list[str]
    moved_twice: list[str]  # dead-lettered, or returned to a quorum queue, twice (``check``)
    restart_s: float
    first_confirm_s: float | None
    killed_s: float | None
    stream_confirmed: int = 0
    stream_read: int = 0  # deliveries to stream readers during the cycle
    stream_sessions: int = 0
    stream_held: int = 0  # messages in both streams after the restart
    stream_dropped: int = 0  # stream.ret's first offset: what retention dropped so far
    stream_faults: list[str] = field(default_factory=list)


def declare(broker: processes.BrokerProcess) -> None:
    conn = clients.connect(broker)
    ch = conn.channel()
    for name in DEAD:
        ch.queue_declare(name, durable=True)
    args: dict[str, dict[str, Any]] = {
        queue: {"x-dead-letter-exchange": "", "x-dead-letter-routing-key": dead}
        for queue, dead in DEAD_LETTERS.items()
    }
    args["ttl"]["x-message-ttl"] = 30
    args["overflow"].update({"x-max-length": 50, "x-overflow": "drop-head"})
    args["quorum"].update({"x-queue-type": "quorum", "x-delivery-limit": 1})
    args["ring"] = {"x-max-length": 50, "x-overflow": "drop-head"}
    for name in QUEUES:
        ch.queue_declare(name, durable=True, arguments=args.get(name))
    ch.exchange_declare("fan", "fanout", durable=True)
    for name in ("fan.a", "fan.b", "fan.c"):
        ch.queue_bind(name, "fan")
    torture_streams.declare(ch)
    conn.close()


# -- the clients ---------------------------------------------------------------------------


async def publisher(
    url: str, name: str, ledger: Ledger, stop: asyncio.Event, rng: random.Random
) -> None:
    """Confirm mode, up to 16 publishes in flight, spread over every target."""
    targets: list[tuple[str, str, tuple[str, ...]]] = [("", q, (q,)) for q in QUEUES[:-3]]
    targets.append(("fan", "", ("fan.a", "fan.b", "fan.c")))
    targets += [("", stream, (stream,)) for stream in STREAMS for _ in range(2)]  # 4 in 18
    seq = 0
    with contextlib.suppress(Exception):
        connection = await aio_pika.connect(url)
        channel = await connection.channel(publisher_confirms=True)
        exchanges = {"": channel.default_exchange, "fan": await channel.get_exchange("fan")}

        async def one(message_id: str, target: tuple[str, str, tuple[str, ...]]) -> None:
            exchange, key, queues = target
            message = aio_pika.Message(
                body_for(message_id), delivery_mode=aio_pika.DeliveryMode.PERSISTENT
            )
            with contextlib.suppress(Exception):
                await exchanges[exchange].publish(message, routing_key=key)
                ledger.confirm(queues, message_id)  # only reached on basic.ack

        while not stop.is_set():
            batch: list[Coroutine[Any, Any, None]] = []
            for _ in range(rng.randint(1, 16)):
                seq += 1
                batch.append(one(f"{name}-{seq}", rng.choice(targets)))
            await asyncio.gather(*batch)
        with contextlib.suppress(Exception):
            await connection.close()


async def tx_publisher(
    url: str, name: str, ledger: Ledger, stop: asyncio.Event, rng: random.Random
) -> None:
    """Transactions of 1-10 publishes; confirmed when tx.commit-ok arrives."""
    seq = 0
    with contextlib.suppress(Exception):
        connection = await aio_pika.connect(url)
        channel = await connection.channel(publisher_confirms=False)
        tx = channel.transaction()
        await tx.select()  # once: the channel stays transactional, each commit starts the next
        while not stop.is_set():
            ids: list[str] = []
            for _ in range(rng.randint(1, 10)):
                seq += 1
                ids.append(f"{name}-{seq}")
                message = aio_pika.Message(
                    body_for(ids[-1]), delivery_mode=aio_pika.DeliveryMode.PERSISTENT
                )
                await channel.default_exchange.publish(message, routing_key="ack1")
            await tx.commit()
            for message_id in ids:
                ledger.confirm(("ack1",), message_id)


async def consumer(
    url: str, queue: str, ledger: Ledger, stop: asyncio.Event, rng: random.Random
) -> None:
    """One consumer pattern on ``queue`` until ``stop``; acks are noted before they are sent."""
    while not stop.is_set():
        with contextlib.suppress(Exception):
            connection = await aio_pika.connect(url)
            await _consume_for_a_while(connection, queue, ledger, stop, rng)
            await connection.close()  # "connclose" stops here with unacked ones: they go back
        await asyncio.sleep(0.01)


async def _consume_for_a_while(
    connection: AbstractConnection,
    queue: str,
    ledger: Ledger,
    stop: asyncio.Event,
    rng: random.Random,
) -> None:
    channel = await connection.channel()
    await channel.set_qos(prefetch_count=rng.choice([0, 10, 100]))
    source = await channel.get_queue(queue)
    pending: list[str] = []
    lifetime = rng.randint(20, 400) if queue in ("chclose", "connclose") else None
    seen = 0
    async with source.iterator(timeout=0.5) as messages:
        with contextlib.suppress(asyncio.TimeoutError):
            async for message in messages:
                seen += 1
                message_id = parse(message.body)
                if queue == "batch":
                    pending.append(message_id)
                    if len(pending) >= 50:
                        ledger.ack(queue, pending)
                        pending = []
                        await message.ack(multiple=True)
                elif queue == "quorum":  # requeued until past the delivery limit: dead-lettered
                    await message.nack(requeue=True)
                elif queue == "nack":
                    if message.redelivered:
                        await message.reject(requeue=False)  # dead-lettered into dead.nack
                    else:
                        await message.nack(requeue=True)
                elif lifetime is not None and seen >= lifetime:
                    break  # the channel (or connection) closes with this one unacked
                else:
                    ledger.ack(queue, [message_id])
                    await message.ack()
                if stop.is_set():
                    break
    with contextlib.suppress(Exception):
        await channel.close()


FIRST_CONFIRM_TIMEOUT_S = 30.0


class NoConfirmError(AssertionError):
    """The broker confirmed nothing to three publishers for ``FIRST_CONFIRM_TIMEOUT_S``."""


async def killer(
    broker: processes.BrokerProcess,
    ledger: Ledger,
    stop: asyncio.Event,
    rng: random.Random,
    how: signal.Signals,
) -> None:
    """Kill at a random moment, but never before the first confirm: a cycle that confirmed
    nothing would check nothing (on a loaded machine the clients' set-up alone can outlast the
    shortest delays). A broker that confirms nothing for half a minute fails the cycle."""
    await asyncio.sleep(rng.uniform(0.4, 1.6))
    try:
        await asyncio.wait_for(ledger.any_confirm.wait(), FIRST_CONFIRM_TIMEOUT_S)
    except TimeoutError:
        raise NoConfirmError(
            f"no publish was confirmed {FIRST_CONFIRM_TIMEOUT_S:g}s after the cycle's random "
            f"kill delay: the broker stalled (its log: {broker.console_log})"
        ) from None
    finally:
        ledger.killed_s = time.monotonic() - ledger.began
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, broker.kill, how)
        stop.set()


async def one_cycle(
    broker: processes.BrokerProcess,
    rng: random.Random,
    how: signal.Signals,
    cycle: int,
    history: torture_streams.History,
) -> Ledger:
    url = f"amqp://guest:guest@127.0.0.1:{broker.amqp_port}/"
    ledger = Ledger()
    stop = asyncio.Event()
    tasks = [publisher(url, f"c{cycle}.p{n}", ledger, stop, rng) for n in range(2)]
    tasks.append(tx_publisher(url, f"c{cycle}.tx", ledger, stop, rng))
    tasks += [consumer(url, queue, ledger, stop, rng) for queue in CONSUMED]
    tasks.append(consumer(url, "fan.a", ledger, stop, rng))
    for stream in STREAMS:  # two readers each, from random places
        end = history.end(stream)
        tasks += [
            torture_streams.reader(url, stream, ledger.streams, end, parse, stop, rng)
            for _ in range(2)
        ]
    tasks.append(killer(broker, ledger, stop, rng, how))
    await asyncio.wait_for(asyncio.gather(*tasks), timeout=60)
    return ledger


# -- after the restart: the ledger ----------------------------------------------------------


def drain_all(broker: processes.BrokerProcess) -> dict[str, list[str]]:
    conn = clients.connect(broker)
    ch = conn.channel()
    found = {
        name: [parse(body) for body in clients.drain(ch, name, limit=1_000_000)]
        for name in QUEUES + DEAD
    }
    conn.close()
    return found


def check(ledger: Ledger, found: dict[str, list[str]]) -> tuple[list[str], list[str], list[str]]:
    """(lost, duplicated, moved twice) message ids, each as ``queue/id``.

    A move between two log records is at-least-once across a crash: the new record is made
    durable before the old one's ack is written (``store/messages.py``), so kill -9 between
    the two brings both back. That is a dead-lettered message found again in its source (and
    dead-lettered a second time), and a quorum queue's returned message, re-written with its
    delivery count, found twice in the quorum queue. Those are counted apart; a duplicate
    anywhere else is a defect.
    """
    lost: list[str] = []
    duplicated: list[str] = []
    moved_twice: list[str] = []
    for queue, ids in found.items():
        twice = [f"{queue}/{i}" for i, n in Counter(ids).items() if n > 1]
        if queue in MOVED_WITHIN:
            moved_twice += twice
        else:
            duplicated += twice
    for queue, confirmed in ledger.confirmed.items():
        if queue in MAY_DROP or queue in STREAMS:  # streams: torture_streams.History.check
            continue
        accounted = set(found.get(queue, ())) | ledger.acked.get(queue, set())
        dead = DEAD_LETTERS.get(queue)
        if dead is not None:
            accounted |= set(found.get(dead, ()))
        lost += [f"{queue}/{i}" for i in sorted(confirmed - accounted)]
    return lost, duplicated, moved_twice


def run(
    broker: processes.BrokerProcess,
    *,
    cycles: int,
    seed: int,
    log: Callable[[str], object] = print,
) -> list[CycleResult]:
    """``cycles`` crash cycles against a started ``broker``; returns one result per cycle."""
    rng = random.Random(seed)
    declare(broker)
    history = torture_streams.History()
    results = []
    for cycle in range(cycles):
        how = rng.choice([signal.SIGKILL, signal.SIGKILL, signal.SIGTERM])
        began = time.monotonic()
        ledger = asyncio.run(one_cycle(broker, rng, how, cycle, history))
        ran = time.monotonic() - began
        began = time.monotonic()
        broker.start()
        restart = time.monotonic() - began
        found = drain_all(broker)
        lost, duplicated, moved_twice = check(ledger, found)
        in_streams = torture_streams.read_all(broker, parse)
        stream_confirmed = {s: ledger.confirmed.get(s, set()) for s in STREAMS}
        stream_lost, stream_faults, dropped = history.check(
            f"c{cycle}.", stream_confirmed, ledger.streams, in_streams
        )
        lost += stream_lost
        result = CycleResult(
            cycle=cycle,
            signal=how.name,
            ran_s=round(ran, 2),
            confirmed=sum(len(ids) for ids in ledger.confirmed.values()),
            transacted=sum(".tx-" in i for ids in ledger.confirmed.values() for i in ids),
            acked=sum(len(ids) for ids in ledger.acked.values()),
            recovered=sum(len(ids) for ids in found.values()),
            lost=lost,
            duplicated=duplicated,
            moved_twice=moved_twice,
            restart_s=round(restart, 2),
            first_confirm_s=_rounded(ledger.first_confirm_s),
            killed_s=_rounded(ledger.killed_s),
            stream_confirmed=sum(len(ids) for ids in stream_confirmed.values()),
            stream_read=sum(len(s.offsets) for s in ledger.streams.sessions),
            stream_sessions=len(ledger.streams.sessions),
            stream_held=sum(len(r.ids) for r in in_streams.values()),
            stream_dropped=dropped,
            stream_faults=stream_faults,
        )
        results.append(result)
        log(
            f"cycle {cycle + 1}/{cycles} {how.name}: confirmed {result.confirmed} "
            f"({result.transacted} by tx.commit), "
            f"acked {result.acked}, recovered {result.recovered}, lost {len(lost)}, "
            f"duplicated {len(duplicated)}, first confirm {result.first_confirm_s}s, "
            f"killed {result.killed_s}s, restart {restart:.2f}s; streams: confirmed "
            f"{result.stream_confirmed}, read {result.stream_read} in {result.stream_sessions} "
            f"sessions, held {result.stream_held}, dropped {dropped}, "
            f"faults {len(stream_faults)}"
        )
    return results


def _rounded(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds, 2)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cycles", type=int, default=100)
    parser.add_argument("--seed", type=int, default=int(time.time()))
    parser.add_argument("--out", type=Path, default=Path("test-artifacts/torture.json"))
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="hutch-torture-") as work:
        broker = brokers.HutchBroker(work_dir=Path(work))
        broker.start()
        try:
            results = run(broker, cycles=args.cycles, seed=args.seed, log=_say)
        finally:
            broker.stop()
            loud = loud_lines(broker.console_log)
    lost = sum(len(r.lost) for r in results)
    summary = {
        "seed": args.seed,
        "cycles": len(results),
        "kills": sum(r.signal == "SIGKILL" for r in results),
        "sigterms": sum(r.signal == "SIGTERM" for r in results),
        "confirmed": sum(r.confirmed for r in results),
        "acked": sum(r.acked for r in results),
        "lost": lost,
        "duplicated": sum(len(r.duplicated) for r in results),
        "moved_twice": sum(len(r.moved_twice) for r in results),
        "stream_confirmed": sum(r.stream_confirmed for r in results),
        "stream_read": sum(r.stream_read for r in results),
        "stream_sessions": sum(r.stream_sessions for r in results),
        "stream_dropped": max((r.stream_dropped for r in results), default=0),
        "stream_faults": [f for r in results for f in r.stream_faults],
        "loud_lines": loud,
        "results": [asdict(r) for r in results],
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(summary, indent=2))
    _say(
        f"{summary['cycles']} cycles ({summary['kills']} kill -9, {summary['sigterms']} SIGTERM), "
        f"seed {args.seed}: {summary['confirmed']} confirmed, {lost} lost, "
        f"{summary['duplicated']} duplicated, {summary['moved_twice']} moved twice "
        f"(at-least-once), {len(loud)} ERROR/CRITICAL lines; streams: "
        f"{summary['stream_confirmed']} confirmed, {summary['stream_read']} read in "
        f"{summary['stream_sessions']} sessions, {summary['stream_dropped']} dropped by "
        f"retention, {len(summary['stream_faults'])} faults; figures in {args.out}"
    )
    for fault in summary["stream_faults"]:
        _say(f"  stream fault: {fault}")
    for line in loud:
        _say(f"  loud: {line}")
    return 1 if lost or summary["duplicated"] or loud or summary["stream_faults"] else 0


def loud_lines(console: Path) -> list[str]:
    """The broker's ERROR and CRITICAL lines over every start of a run.

    An ordinary kill -9 is not damage and a SIGTERM is not a failed write, so a crash cycle
    that makes the broker log either has found a bug even when nothing was lost.
    """
    text = console.read_text(errors="replace") if console.exists() else ""
    return [line for line in text.splitlines() if "ERROR" in line or "CRITICAL" in line]


def _say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    sys.exit(main())
