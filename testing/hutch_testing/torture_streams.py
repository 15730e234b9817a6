"""The crash cycles' stream queues: readers at random offsets, and the offset ledger.

Why apart from ``torture``: a stream is checked by offset, not by queue contents. Its messages
stay after delivery and every one has a dense offset, so a crash must leave each confirmed
message at the offset it got, and never give an offset somebody saw to another message. The
cycles (``torture.one_cycle``) publish into two streams with the other targets: ``stream``
(no retention: everything ever confirmed must be there, cycle after cycle) and ``stream.ret``
(``x-max-length-bytes`` over small segments: retention drops the oldest whole segments while
the cycles run). Readers start at ``first``, ``next``, a numeric offset or a timestamp, ack as
they go and close their channel or connection after a random number of deliveries.

After each restart ``read_all`` reads each stream from ``first`` and ``History.check`` holds
it against everything known: what readers saw during the cycle, what earlier reads found,
what publishers were confirmed.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import itertools
import random
from dataclasses import dataclass, field
from typing import Any

import aio_pika
from hutch_demo.management import Management
from pika.adapters.blocking_connection import BlockingChannel

from hutch_testing import clients

PLAIN = "stream"
RETAINED = "stream.ret"
STREAMS = (PLAIN, RETAINED)
MAX_BYTES = 30_000  # ~50 records of ~600 bytes: retention drops within a few cycles
SEGMENT_BYTES = 4_000  # ~6 records a segment
ARGUMENTS: dict[str, dict[str, Any]] = {
    PLAIN: {"x-queue-type": "stream"},
    RETAINED: {
        "x-queue-type": "stream",
        "x-max-length-bytes": MAX_BYTES,
        "x-stream-max-segment-size-bytes": SEGMENT_BYTES,
    },
}
KINDS = ("first", "next", "offset", "timestamp")


def declare(channel: BlockingChannel) -> None:
    for name in STREAMS:
        channel.queue_declare(name, durable=True, arguments=ARGUMENTS[name])


@dataclass
class Session:
    """One reader's consume: where it asked to start and the offsets it got, in order."""

    queue: str
    kind: str
    start: int | None  # the numeric offset asked for
    offsets: list[int] = field(default_factory=list)


@dataclass
class Seen:
    """What readers saw during one cycle: offset -> message id per stream, and the sessions."""

    at: dict[str, dict[int, str]] = field(default_factory=dict)
    sessions: list[Session] = field(default_factory=list)
    conflicts: list[str] = field(default_factory=list)  # one offset, two messages, before a crash

    def saw(self, session: Session, offset: int, message_id: str) -> None:
        session.offsets.append(offset)
        known = self.at.setdefault(session.queue, {}).setdefault(offset, message_id)
        if known != message_id:
            self.conflicts.append(f"{session.queue}@{offset}: {known} and {message_id}")


async def reader(
    url: str,
    queue: str,
    seen: Seen,
    known_end: int,
    parse: Any,
    stop: asyncio.Event,
    rng: random.Random,
) -> None:
    """Consume ``queue`` from random places until ``stop``, one session after another.

    ``known_end`` is one past the last offset an earlier read found, so a numeric start is one
    that exists (retention may have dropped it since: the broker then starts at the first)."""
    while not stop.is_set():
        with contextlib.suppress(Exception):
            connection = await aio_pika.connect(url)
            for _ in range(rng.randint(1, 3)):  # channels closing, then the connection
                await _session(connection, queue, seen, known_end, parse, stop, rng)
                if stop.is_set():
                    break
            await connection.close()  # sometimes with unacked deliveries: acks only return credit
        await asyncio.sleep(0.01)


async def _session(
    connection: aio_pika.abc.AbstractConnection,
    queue: str,
    seen: Seen,
    known_end: int,
    parse: Any,
    stop: asyncio.Event,
    rng: random.Random,
) -> None:
    channel = await connection.channel()
    await channel.set_qos(prefetch_count=rng.choice([1, 10, 100]))
    source = await channel.get_queue(queue)
    kind = rng.choice(KINDS)
    start: int | None = None
    where: Any = kind
    if kind == "offset":
        start = where = rng.randrange(known_end) if known_end else 0
    elif kind == "timestamp":
        ago = datetime.timedelta(seconds=rng.uniform(0, 3))
        where = datetime.datetime.now(datetime.UTC) - ago
    session = Session(queue, kind, start)
    seen.sessions.append(session)
    lifetime = rng.randint(5, 100)
    batch = rng.choice([1, 1, 10])
    done = asyncio.Event()

    async def on_message(message: aio_pika.abc.AbstractIncomingMessage) -> None:
        # A callback, not aio-pika's iterator: closing an iterator rejects what it buffered,
        # and a stream answers basic.reject with 540 (RabbitMQ too), ending the connection.
        if done.is_set():
            return  # past this session's end: left unacked, the channel closes
        offset = (message.headers or {}).get("x-stream-offset")
        if not isinstance(offset, int):
            raise AssertionError(f"x-stream-offset not a long: {message.headers}")
        seen.saw(session, offset, parse(message.body))
        if len(session.offsets) % batch == 0:
            await message.ack(multiple=batch > 1)
        if len(session.offsets) >= lifetime:
            done.set()

    await source.consume(on_message, arguments={"x-stream-offset": where})
    waiting = asyncio.ensure_future(done.wait())
    stopping = asyncio.ensure_future(stop.wait())
    await asyncio.wait(
        {waiting, stopping}, timeout=rng.uniform(0.2, 1.0), return_when="FIRST_COMPLETED"
    )
    waiting.cancel()
    stopping.cancel()
    done.set()
    with contextlib.suppress(Exception):
        await channel.close()


@dataclass
class Read:
    """One stream read from ``first`` after a restart."""

    offsets: list[int]
    ids: list[str]
    body_bytes: int
    segments: int


def read_all(broker: clients.AmqpReachable, parse: Any) -> dict[str, Read]:
    """Each stream from ``first`` to the last offset the management API reports."""
    api = Management(broker)  # type: ignore[arg-type]
    found = {}
    for name in STREAMS:
        item = api.queue(name)
        count = int(item.get("messages") or 0)
        found[name] = _read(broker, name, count, parse)
        found[name].segments = int(item.get("segments") or 0)
    return found


def _read(broker: clients.AmqpReachable, queue: str, count: int, parse: Any) -> Read:
    read = Read([], [], 0, 0)
    if not count:
        return read
    connection = clients.connect(broker)
    channel = connection.channel()
    channel.basic_qos(prefetch_count=1000)

    def on_message(ch: Any, method: Any, properties: Any, body: bytes) -> None:
        read.offsets.append(properties.headers["x-stream-offset"])
        read.ids.append(parse(body))
        read.body_bytes += len(body)
        if len(read.offsets) % 500 == 0:
            ch.basic_ack(method.delivery_tag, multiple=True)

    channel.basic_consume(queue, on_message, arguments={"x-stream-offset": "first"})
    waited = 0.0  # seconds without a delivery: a read that stalls fails the cycle's count
    while len(read.offsets) < count and waited < 60:
        before = len(read.offsets)
        connection.process_data_events(0.2)
        waited = 0.0 if len(read.offsets) > before else waited + 0.2
    connection.process_data_events(0.2)  # nothing past what the API counted
    connection.close()
    return read


@dataclass
class History:
    """Across cycles: offset -> message id of every stream message ever found or seen."""

    at: dict[str, dict[int, str]] = field(default_factory=lambda: {s: {} for s in STREAMS})
    confirmed: dict[str, set[str]] = field(default_factory=lambda: {s: set() for s in STREAMS})

    def end(self, queue: str) -> int:
        """One past the highest offset known so far."""
        return max(self.at[queue], default=-1) + 1

    def check(
        self,
        cycle_prefix: str,
        confirmed: dict[str, set[str]],
        seen: Seen,
        found: dict[str, Read],
    ) -> tuple[list[str], list[str], int]:
        """(lost, faults, dropped by retention) for one cycle's streams, then remember them.

        Lost: a confirmed message not in ``stream`` (ever, from any cycle), or not in
        ``stream.ret`` although its offset is known and still held. Faults: offsets not dense,
        an offset that names another message than it did before (seen by a reader or found by
        an earlier read), a message of this cycle at an offset not above every one known
        before it, a reader's session that skipped or went back, a numeric or ``first``
        start not honoured, more or less kept by retention than whole segments allow.
        """
        lost: list[str] = []
        faults: list[str] = [f"seen twice: {c}" for c in seen.conflicts]
        dropped = 0
        for queue in STREAMS:
            read = found[queue]
            self.confirmed[queue] |= confirmed.get(queue, set())
            first = read.offsets[0] if read.offsets else self.end(queue)
            if read.offsets != list(range(first, first + len(read.offsets))):
                faults.append(f"{queue}: offsets not dense from {first}")
            if queue == PLAIN and first != 0:
                faults.append(f"{queue}: first offset {first}, nothing may be dropped")
            at = dict(zip(read.offsets, read.ids, strict=True))
            before = self.end(queue)
            earlier = {**self.at[queue], **seen.at.get(queue, {})}
            for offset, message_id in earlier.items():
                if offset in at and at[offset] != message_id:
                    faults.append(f"{queue}@{offset} reused: {message_id} then {at[offset]}")
                elif offset not in at and offset >= first:
                    lost.append(f"{queue}@{offset}/{message_id} (seen, now gone)")
            new = [o for o, i in at.items() if i.startswith(cycle_prefix)]
            if new and min(new) < before:
                faults.append(f"{queue}: this cycle's offset {min(new)} is below {before}")
            held = set(read.ids)
            if len(held) != len(read.ids):
                faults.append(f"{queue}: a message at two offsets")
            if queue == PLAIN:
                lost += [f"{queue}/{i}" for i in sorted(self.confirmed[queue] - held)]
            else:
                dropped = first
                faults += self._retention(read, first)
                ever = set(self.at[queue].values()) | set(seen.at.get(queue, {}).values())
                ever |= held | self.confirmed[queue]
                if len(ever) > first + len(read.ids):  # more confirmed or seen than offsets
                    lost.append(f"{queue}: {len(ever)} messages known, {first + len(held)} offsets")
            faults += _sessions(queue, seen)
            self.at[queue].update(at)
            for offset, message_id in seen.at.get(queue, {}).items():
                self.at[queue].setdefault(offset, message_id)
        return lost, faults, dropped

    @staticmethod
    def _retention(read: Read, first: int) -> list[str]:
        """Whole oldest segments only: what is kept is over the limit less one segment (it
        was dropped only while the total exceeded the limit), and at most the limit plus the
        segment being written. Record bytes exceed body bytes by the headers (~70 bytes of
        ~560), hence the slack below."""
        if not first:
            return []
        faults = []
        if read.body_bytes < 0.8 * (MAX_BYTES - 2 * SEGMENT_BYTES):
            faults.append(f"{RETAINED}: only {read.body_bytes} bytes kept, more than dropped")
        if read.body_bytes > MAX_BYTES + 2 * SEGMENT_BYTES:
            faults.append(f"{RETAINED}: {read.body_bytes} bytes kept over {MAX_BYTES}")
        return faults


def _sessions(queue: str, seen: Seen) -> list[str]:
    faults = []
    for session in seen.sessions:
        if session.queue != queue or not session.offsets:
            continue
        offsets = session.offsets
        step = [b - a for a, b in itertools.pairwise(offsets)]
        if queue == PLAIN and any(s != 1 for s in step):
            faults.append(f"{queue}: a {session.kind} reader skipped: {offsets[:5]}...")
        if any(s <= 0 for s in step):
            faults.append(f"{queue}: a {session.kind} reader went back: {offsets[:5]}...")
        if queue == PLAIN and session.kind == "first" and offsets[0] != 0:
            faults.append(f"{queue}: a reader from first began at {offsets[0]}")
        if queue == PLAIN and session.kind == "offset" and offsets[0] != session.start:
            faults.append(f"{queue}: a reader from {session.start} began at {offsets[0]}")
    return faults
