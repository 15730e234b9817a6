"""The noisy-neighbour harness: a canary tenant in its own process, timed while another attacks.

Why it exists: tenants share one broker, and hutch-broker runs every tenant's work on one asyncio
event loop. Work that grows with a tenant's object count (a policy matched against every queue
name, a publish walked through thousands of topic bindings, a listing of 5,000 queues) freezes the
loop for everybody while it runs. The promise under test is narrow and measurable: *whatever one
tenant does, a small publish/consume round trip of another tenant stays fast*. So the harness has
two halves:

- ``Canary``: a separate Python process (so the attacking test's own CPU work does not skew its
  timers) that logs in as its own user on its own vhost, publishes one small message every
  ``INTERVAL_S`` with publisher confirms and consumes it back, and reports the round trips
  (publish -> delivery) as max, p50, p99, count, misses (not back within ``MISS_AFTER_S``, or lost
  with a connection the heartbeat dropped) and its own timer lag (how late its own loop woke: the
  share of a round trip that was the canary's machine, not the broker). Given the broker's pid
  (hutch-broker's loop is its main thread), it also reports each round trip less the time the
  broker's loop thread and the canary's own thread were runnable but waiting for a CPU (their
  run-queue wait, ``/proc/<pid>/schedstat``): the broker's own share. On a loaded 2-core machine
  that wait alone reaches hundreds of milliseconds, which is the machine's, not the broker's; a
  broker that runs another tenant's work, or blocks, or is stopped, still shows in full.
- the cases (``hutch_testing.noisy_cases``): an attacker with its own user, vhost and only the
  tags and permissions the case names, each returning a ``CaseResult`` that lists what broke the
  promise.

``tests/noisy`` runs the bounded form in CI; ``bench/noisy.py --rounds N`` runs every case against
hutch-broker and RabbitMQ 3.10.8, interleaved, and writes docs/isolation/figures.md.
Run ``python -m hutch_testing.noisy canary --help`` for the canary process itself.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.parse
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Protocol

import aio_pika
from aio_pika.abc import AbstractIncomingMessage
from hutch_demo import management

from hutch_testing.cpuwait import run_queue_wait_ns

INTERVAL_S = 0.020  # one round trip started every 20 ms, as the canary
MISS_AFTER_S = 5.0  # a message not back within this is a miss (and counts at least this long)
HEARTBEAT_S = 5  # the canary's negotiated heartbeat: a loop frozen ~18 s drops its connection
READY_TIMEOUT_S = 30.0
CLOSE_TIMEOUT_S = 2.0
STOP_GRACE_S = CLOSE_TIMEOUT_S + 15.0  # and the canary's miss_after_s, which it waits out
RECONNECT_PAUSE_S = 0.25


@dataclass(frozen=True)
class CanaryBound:
    """The most a canary may see while another tenant attacks, in the CI form of the suite.

    The target on a quiet machine is a max round trip of about 50 ms. CI shares 2 cores with
    other jobs, where a quiet canary alone already sees 20-60 ms spikes, so CI asserts a
    looser bound that still tells a working broker from a frozen loop: today's attacks cost
    the canary seconds (1.5 s p99, 17 s max, or a dropped connection), a fixed broker tens of
    milliseconds. No miss is ever allowed: a round trip that never comes back is a failure
    on any machine.
    """

    max_ms: float = 250.0
    p99_ms: float = 100.0
    misses: int = 0


CI_BOUND = CanaryBound()


class Reachable(Protocol):
    """A broker on loopback: hutch-broker or RabbitMQ launchers, or the chain's Endpoint."""

    host: str
    amqp_port: int
    http_port: int

    @property
    def http_url(self) -> str: ...

    @property
    def credentials(self) -> tuple[str, str]: ...


@dataclass(frozen=True)
class Tenant:
    """A user on its own vhost, with exactly the tags and permissions a case grants it."""

    vhost: str
    user: str
    password: str

    def amqp_url(self, broker: Reachable, *, heartbeat: int = HEARTBEAT_S) -> str:
        vhost = urllib.parse.quote(self.vhost, safe="")
        return (
            f"amqp://{self.user}:{self.password}@{broker.host}:{broker.amqp_port}/{vhost}"
            f"?heartbeat={heartbeat}"
        )

    @property
    def credentials(self) -> tuple[str, str]:
        return self.user, self.password


def create_tenant(
    broker: Reachable,
    name: str,
    *,
    tags: str = "",
    permissions: tuple[str, str, str] = (".*", ".*", ".*"),
) -> Tenant:
    """Create vhost ``name`` and user ``name`` (tags, permissions on that vhost only) as admin."""
    admin = management.Management(broker, timeout=60.0)
    tenant = Tenant(vhost=name, user=name, password=f"{name}-secret")
    quoted = management.quote(name)
    steps = [
        ("PUT", f"/vhosts/{quoted}", {}),
        ("PUT", f"/users/{quoted}", {"password": tenant.password, "tags": tags}),
        (
            "PUT",
            f"/permissions/{quoted}/{quoted}",
            dict(zip(("configure", "write", "read"), permissions, strict=True)),
        ),
    ]
    for method, path, body in steps:
        response = admin.request(method, path, body)
        if not response.ok:
            raise AssertionError(f"creating tenant {name!r}: {method} {path} -> {response}")
    return tenant


# --- the canary's report ------------------------------------------------------------------------


@dataclass
class CanaryReport:
    """What one canary saw between start and stop; all times in milliseconds."""

    count: int = 0
    delivered: int = 0
    misses: int = 0
    drops: int = 0
    start_retries: int = 0  # connects that failed before the first round trip: not drops
    max_ms: float = 0.0
    p50_ms: float = 0.0
    p99_ms: float = 0.0
    own_lag_max_ms: float = 0.0
    errors: list[str] = field(default_factory=list)
    # The round trips less the broker's loop thread's and the canary's CPU wait, when measured.
    broker_max_ms: float | None = None
    broker_p99_ms: float | None = None
    cpu_wait_max_ms: float = 0.0
    miss_after_s: float = MISS_AFTER_S  # what counted as a miss (``Canary``'s miss_after_s)

    @classmethod
    def from_samples(
        cls,
        samples: list[float],
        *,
        misses: int,
        drops: int,
        lag_ms: float,
        errors: list[str],
        start_retries: int = 0,
        broker_samples: list[float] | None = None,
        cpu_wait_max_ms: float = 0.0,
        miss_after_s: float = MISS_AFTER_S,
    ) -> CanaryReport:
        """``samples``: one per message sent, in ms (a miss counts as long as it was waited for);
        ``broker_samples``: the same round trips less the CPU waits, when they were measured."""
        ordered = sorted(samples)
        own = sorted(broker_samples) if broker_samples is not None else None
        return cls(
            count=len(ordered),
            delivered=len(ordered) - misses,
            misses=misses,
            drops=drops,
            start_retries=start_retries,
            max_ms=ordered[-1] if ordered else 0.0,
            p50_ms=percentile(ordered, 50),
            p99_ms=percentile(ordered, 99),
            own_lag_max_ms=lag_ms,
            errors=errors,
            broker_max_ms=own[-1] if own else (0.0 if own is not None else None),
            broker_p99_ms=percentile(own, 99) if own is not None else None,
            cpu_wait_max_ms=cpu_wait_max_ms,
            miss_after_s=miss_after_s,
        )

    def violations(self, bound: CanaryBound = CI_BOUND) -> list[str]:
        """Each way this report breaks ``bound``, as a sentence; empty when it holds."""
        found = []
        if self.count == 0:
            found.append("the canary sent nothing")
        if self.misses > bound.misses:
            found.append(f"{self.misses} canary messages missed (not back in {self.miss_after_s}s)")
        if self.drops:
            found.append(f"the canary's connection dropped {self.drops} times")
        worst, p99, whose = self.max_ms, self.p99_ms, ""
        if self.broker_max_ms is not None and self.broker_p99_ms is not None:
            worst, p99, whose = self.broker_max_ms, self.broker_p99_ms, " (the broker's own share)"
        if worst > bound.max_ms:
            found.append(f"canary max {worst:.0f} ms > {bound.max_ms:.0f} ms{whose}")
        if p99 > bound.p99_ms:
            found.append(f"canary p99 {p99:.0f} ms > {bound.p99_ms:.0f} ms{whose}")
        return found

    def summary(self) -> str:
        return (
            f"canary: {self.count} sent, max {self.max_ms:.1f} ms, p50 {self.p50_ms:.1f} ms, "
            f"p99 {self.p99_ms:.1f} ms, {self.misses} misses, {self.drops} drops, "
            f"{self.start_retries} start retries, own timer lag max {self.own_lag_max_ms:.1f} ms"
            + (
                f"; the broker's own share: max {self.broker_max_ms:.1f} ms, p99 "
                f"{self.broker_p99_ms:.1f} ms (CPU wait up to {self.cpu_wait_max_ms:.1f} ms)"
                if self.broker_max_ms is not None and self.broker_p99_ms is not None
                else ""
            )
            + (f", errors: {'; '.join(self.errors[:3])}" if self.errors else "")
        )


def percentile(ordered: list[float], pct: float) -> float:
    """Nearest-rank percentile of an ascending list (0.0 for an empty one)."""
    if not ordered:
        return 0.0
    rank = max(1, math.ceil(pct / 100 * len(ordered)))
    return ordered[rank - 1]


# --- the canary process, parent side ------------------------------------------------------------


class CanaryError(RuntimeError):
    """The canary process did not start or did not report."""


class Canary:
    """The canary as a child process: ``start()`` returns after its first round trip."""

    def __init__(
        self,
        broker: Reachable,
        tenant: Tenant,
        *,
        work_dir: Path | None = None,
        broker_pid: int | None = None,
        miss_after_s: float = MISS_AFTER_S,
    ) -> None:
        """``broker_pid``: hutch-broker's process, whose main thread runs its loop; with it the
        report also gives the broker's own share of each round trip (the module's docstring).
        ``miss_after_s``: a round trip not back within it is a miss, and a connect that takes
        longer fails; the canary waits it out for what is in flight at ``stop``. Shorter only
        where a test waits it out on purpose (tests/noisy/test_harness.py): the attack cases
        keep 5 s, which no working broker comes near."""
        if not miss_after_s > 0:
            raise ValueError(f"miss_after_s must be positive, not {miss_after_s!r}")
        self.url = tenant.amqp_url(broker)
        self.broker_pid = broker_pid
        self.miss_after_s = miss_after_s
        self._owns_work_dir = work_dir is None
        self.work_dir = work_dir or Path(tempfile.mkdtemp(prefix="hutch-canary-"))
        self.report_path = self.work_dir / "canary-report.json"
        self.ready_path = self.work_dir / "canary-ready"
        self.log_path = self.work_dir / "canary.log"
        self._process: subprocess.Popen[bytes] | None = None

    def start(self) -> Canary:
        self.work_dir.mkdir(parents=True, exist_ok=True)
        for stale in (self.report_path, self.ready_path):
            stale.unlink(missing_ok=True)
        with self.log_path.open("ab") as log:
            self._process = subprocess.Popen(  # noqa: S603 - this module, our own arguments
                [sys.executable, "-m", "hutch_testing.noisy", "canary", "--url", self.url,
                 "--report", str(self.report_path), "--ready", str(self.ready_path),
                 "--miss-after", str(self.miss_after_s),
                 *(["--broker-pid", str(self.broker_pid)] if self.broker_pid else [])],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True, preexec_fn=_die_with_parent,  # noqa: PLW1509 - prctl only
            )  # fmt: skip
        deadline = time.monotonic() + READY_TIMEOUT_S
        while not self.ready_path.exists():
            if self._process.poll() is not None or time.monotonic() > deadline:
                self._kill()
                raise CanaryError(f"the canary never completed a round trip:\n{self._log()}")
            time.sleep(0.02)
        return self

    def stop(self) -> CanaryReport:
        """SIGTERM: the canary stops sending, waits out its in-flight messages, reports."""
        process = self._process
        if process is None:
            raise CanaryError("the canary was not started")
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(signal.SIGTERM)
        try:
            process.wait(self.miss_after_s + STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            self._kill()
            raise CanaryError(
                f"the canary did not report in {self.miss_after_s + STOP_GRACE_S}s:\n{self._log()}"
            ) from None
        if not self.report_path.exists():
            raise CanaryError(f"the canary exited {process.returncode}:\n{self._log()}")
        data = json.loads(self.report_path.read_text())
        return CanaryReport(**data)

    def __enter__(self) -> Canary:
        return self.start()

    def __exit__(self, *_: object) -> None:
        if self._process is not None and self._process.poll() is None:
            self._kill()
        if self._owns_work_dir:
            shutil.rmtree(self.work_dir, ignore_errors=True)

    def _kill(self) -> None:
        if self._process is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self._process.pid, signal.SIGKILL)
            self._process.wait()

    def _log(self) -> str:
        with contextlib.suppress(OSError):
            return self.log_path.read_text(errors="replace")[-4000:]
        return ""


def _die_with_parent() -> None:
    """In the child, before exec: SIGKILL it when the test process dies without stopping it."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


_PR_SET_PDEATHSIG = 1


# --- the canary process, child side -------------------------------------------------------------


class _Session:
    """One connection's worth of round trips; a dropped connection ends it."""

    def __init__(self, probe: _Probe) -> None:
        self.probe = probe
        self.closed = asyncio.Event()
        self.queue_name = ""
        self.connected = False

    async def run(self, url: str, stop: asyncio.Event) -> None:
        connection = await aio_pika.connect(url, timeout=self.probe.miss_after_s)
        self.connected = True
        connection.close_callbacks.add(lambda *_: self.closed.set())
        try:
            channel = await connection.channel(publisher_confirms=True)
            queue = await channel.declare_queue("", exclusive=True, auto_delete=True)
            self.queue_name = queue.name
            await queue.consume(self._delivered, no_ack=True)
            await self._tick(channel, stop)
            await self._wait_out()
        finally:
            with contextlib.suppress(Exception):  # a frozen broker never answers close
                await asyncio.wait_for(connection.close(), CLOSE_TIMEOUT_S)

    async def _wait_out(self) -> None:
        """After stop: let in-flight messages come back, up to their miss deadline."""
        waits = [
            asyncio.ensure_future(event.wait()) for event in (self.probe.all_back, self.closed)
        ]
        await asyncio.wait(
            waits, timeout=self.probe.miss_after_s, return_when=asyncio.FIRST_COMPLETED
        )
        for wait in waits:
            wait.cancel()

    async def _tick(self, channel: aio_pika.abc.AbstractChannel, stop: asyncio.Event) -> None:
        loop = asyncio.get_running_loop()
        due = loop.time()
        while not stop.is_set() and not self.closed.is_set():
            self.probe.lag_ms = max(self.probe.lag_ms, (loop.time() - due) * 1000)
            sequence = self.probe.send()
            task = asyncio.create_task(self._publish(channel, sequence))
            self.probe.tasks.add(task)
            task.add_done_callback(self.probe.tasks.discard)
            due = max(due + INTERVAL_S, loop.time())  # late: skip, never burst
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), max(0.0, due - loop.time()))

    async def _publish(self, channel: aio_pika.abc.AbstractChannel, sequence: int) -> None:
        message = aio_pika.Message(str(sequence).encode(), delivery_mode=1)
        try:
            await channel.default_exchange.publish(message, routing_key=self.queue_name)
        except Exception as error:  # noqa: BLE001 - any failure is the canary's finding
            self.probe.error(f"publish {sequence}: {type(error).__name__}: {error}")

    async def _delivered(self, message: AbstractIncomingMessage) -> None:
        self.probe.delivered(int(message.body))


class CpuWaits:
    """Run-queue waits, in ns: the broker's loop thread's so far, and the canary thread's since
    its previous reading.

    The second field of ``/proc/<tid>/schedstat``: how long the thread was runnable but not
    running. A stopped or blocked thread does not accumulate it, so a broker that is frozen or
    busy still counts in a round trip; only the wait for a CPU is taken out.

    Why the two differ: the broker serves a message in order, so all of its loop's waits while
    the message is out delay it. The canary has one message out every 20 ms and wakes for each
    of the others too; of those, only the wait of the wake-up that reads this message's delivery
    falls inside its round trip (the round trip is timed from after the publish's wake-up). The
    canary reads at every publish and delivery, so its wait since the previous reading is that
    wake-up's wait, with at most 20 ms of other wake-ups' beside it.
    """

    def __init__(self, broker_pid: int) -> None:
        self.broker = Path(f"/proc/{broker_pid}/schedstat")
        self.own = Path("/proc/thread-self/schedstat")
        self._own_last = run_queue_wait_ns(self.own)

    def read(self) -> tuple[int, int]:
        """(the broker's loop thread's wait so far, this thread's wait since the last read)."""
        own = run_queue_wait_ns(self.own)
        since, self._own_last = own - self._own_last, own
        return run_queue_wait_ns(self.broker), since


class _Probe:
    """The canary's ledger: when each message left, when it came back, what was given up."""

    def __init__(self, waits: CpuWaits | None = None, miss_after_s: float = MISS_AFTER_S) -> None:
        self.miss_after_s = miss_after_s
        self.sent_at: dict[int, float] = {}
        self.waited_at: dict[int, int] = {}  # the broker's wait (ns) as each message left
        self.samples: list[float] = []
        self.broker_samples: list[float] | None = [] if waits is not None else None
        self.cpu_wait_max_ms = 0.0
        self.waits = waits
        self.misses = 0
        self.drops = 0
        self.start_retries = 0
        self.lag_ms = 0.0
        self.errors: list[str] = []
        self.tasks: set[asyncio.Task[None]] = set()
        self.first = asyncio.Event()
        self.all_back = asyncio.Event()  # set while nothing is in flight
        self.all_back.set()
        self._next = 0

    def send(self) -> int:
        self._next += 1
        waits = self._cpu_waits()  # also starts the canary's own count afresh
        if waits is not None:
            self.waited_at[self._next] = waits[0]
        self.sent_at[self._next] = time.monotonic()
        self.all_back.clear()
        return self._next

    def _cpu_waits(self) -> tuple[int, int] | None:
        if self.waits is None:
            return None
        try:
            return self.waits.read()
        except (OSError, ValueError, IndexError) as error:  # the broker gone: wall clock only
            self.error(f"CPU waits no longer readable ({error}): wall-clock round trips only")
            self.waits, self.broker_samples = None, None
            return None

    def delivered(self, sequence: int) -> None:
        sent = self.sent_at.pop(sequence, None)
        waited_before = self.waited_at.pop(sequence, None)
        if sent is None:
            return  # already given up as a miss
        waited = (time.monotonic() - sent) * 1000
        self.samples.append(waited)
        waits = self._cpu_waits()
        if self.broker_samples is not None and waits is not None and waited_before is not None:
            broker_wait, own_wait = waits[0] - waited_before, waits[1]
            cpu_wait = (broker_wait + own_wait) / 1e6
            self.cpu_wait_max_ms = max(self.cpu_wait_max_ms, cpu_wait)
            self.broker_samples.append(max(0.0, waited - cpu_wait))
        if waited > self.miss_after_s * 1000:
            self.misses += 1
        self.first.set()
        if not self.sent_at:
            self.all_back.set()

    def give_up(self, *, older_than_s: float = 0.0) -> None:
        """Count messages still out (sent more than ``older_than_s`` ago) as misses."""
        now = time.monotonic()
        for sequence, sent in list(self.sent_at.items()):
            if now - sent >= older_than_s:
                del self.sent_at[sequence]
                self.waited_at.pop(sequence, None)
                self.samples.append((now - sent) * 1000)
                if self.broker_samples is not None:
                    self.broker_samples.append((now - sent) * 1000)  # a miss counts in full
                self.misses += 1

    def error(self, text: str) -> None:
        if len(self.errors) < 20:
            self.errors.append(text)

    def report(self) -> CanaryReport:
        return CanaryReport.from_samples(
            self.samples,
            misses=self.misses,
            drops=self.drops,
            lag_ms=self.lag_ms,
            errors=self.errors,
            start_retries=self.start_retries,
            broker_samples=self.broker_samples,
            cpu_wait_max_ms=self.cpu_wait_max_ms,
            miss_after_s=self.miss_after_s,
        )


async def run_canary(
    url: str,
    stop: asyncio.Event,
    ready: Path | None = None,
    broker_pid: int | None = None,
    miss_after_s: float = MISS_AFTER_S,
) -> CanaryReport:
    """Round trips until ``stop``; a dropped connection is counted and replaced.

    A connect that fails before the first round trip is retried and counted apart, as a start
    retry: the canary measures from its first round trip (``Canary.start`` returns then, and
    bounds the start by ``READY_TIMEOUT_S``), and a broker still busy with a test's set-up can
    take longer than the connect timeout to answer the first handshake on a loaded machine.
    """
    probe = _Probe(CpuWaits(broker_pid) if broker_pid else None, miss_after_s)
    announce = asyncio.create_task(_announce_ready(probe, ready))
    while not stop.is_set():
        session = _Session(probe)
        try:
            await session.run(url, stop)
        except Exception as error:  # noqa: BLE001 - a drop or a refused connection: count, retry
            probe.error(f"session: {type(error).__name__}: {error}")
        if not session.connected and not probe.first.is_set():
            probe.start_retries += 1
            await asyncio.sleep(RECONNECT_PAUSE_S)
        elif not stop.is_set():
            probe.drops += 1
            probe.give_up()  # their queue was exclusive to the dropped connection
            await asyncio.sleep(RECONNECT_PAUSE_S)
    probe.give_up()
    announce.cancel()
    return probe.report()


async def _announce_ready(probe: _Probe, ready: Path | None) -> None:
    await probe.first.wait()
    if ready is not None:
        await asyncio.to_thread(ready.write_text, "ready\n")


def _canary_main(args: argparse.Namespace) -> int:
    async def main() -> CanaryReport:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        if args.seconds:
            loop.call_later(args.seconds, stop.set)
        return await run_canary(args.url, stop, args.ready, args.broker_pid, args.miss_after)

    report = asyncio.run(main())
    text = json.dumps(asdict(report))
    if args.report is None:
        sys.stdout.write(text + "\n")
    else:
        partial = args.report.with_suffix(".partial")
        partial.write_text(text)
        partial.replace(args.report)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hutch_testing.noisy", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    canary = commands.add_parser("canary", help="run a canary until SIGTERM (or --seconds)")
    canary.add_argument("--url", required=True, help="amqp://user:pass@host:port/vhost")
    canary.add_argument("--report", type=Path, help="write the JSON report here (else stdout)")
    canary.add_argument("--ready", type=Path, help="touch this after the first round trip")
    canary.add_argument("--seconds", type=float, default=0.0, help="stop by itself after this")
    canary.add_argument(
        "--miss-after",
        type=float,
        default=MISS_AFTER_S,
        help=f"a round trip not back within this many seconds is a miss ({MISS_AFTER_S})",
    )
    canary.add_argument(
        "--broker-pid", type=int, help="hutch-broker's pid: also report the broker's own share"
    )
    args = parser.parse_args(argv)
    return _canary_main(args)


if __name__ == "__main__":
    sys.exit(main())
