"""The load generator's options and figures, pure: what it was asked and what it prints.

Why apart from ``perftest`` (the sockets): the option grammar follows RabbitMQ PerfTest's short
flags (``-x`` producers, ``-y`` consumers, ``-z`` seconds, ``-s`` size, ``-u`` queue, ``-c``
confirm window, ``-q`` prefetch, ``-C`` messages per producer, ``-f persistent``) so a
``kubectl rabbitmq perf-test`` habit carries over, and the summary lines name the same figures
(sending and receiving rate, consumer latency percentiles); both are tested without a broker.
"""

from __future__ import annotations

import argparse
import math
import os
import urllib.parse
from dataclasses import dataclass, field
from typing import NoReturn


class OptionsError(Exception):
    pass


@dataclass(frozen=True)
class Options:
    uri: str
    producers: int = 1
    consumers: int = 1
    seconds: float = 10.0
    size: int = 12
    queue: str = ""  # empty: a queue of the run's own, deleted at the end
    confirm: int = 0  # outstanding unconfirmed publishes per producer; 0: no confirms
    prefetch: int = 100
    messages: int = 0  # per producer; 0: until ``seconds`` pass
    persistent: bool = False
    cacert: str | None = None
    server_name: str | None = None

    @property
    def address(self) -> tuple[str, int, bool]:
        """(host, port, TLS) from the URI."""
        parts = urllib.parse.urlsplit(self.uri)
        tls = parts.scheme == "amqps"
        return parts.hostname or "localhost", parts.port or (5671 if tls else 5672), tls

    @property
    def vhost(self) -> str:
        path = urllib.parse.urlsplit(self.uri).path
        return urllib.parse.unquote(path[1:]) if len(path) > 1 else "/"

    @property
    def credentials(self) -> tuple[str, str]:
        parts = urllib.parse.urlsplit(self.uri)
        return (
            urllib.parse.unquote(parts.username or "guest"),
            urllib.parse.unquote(parts.password or "guest"),
        )


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise OptionsError(message)


def _positive(text: str) -> int:
    value = int(text)
    if value < 0:
        raise ValueError(text)
    return value


def parse(argv: list[str], env: dict[str, str] | None = None) -> Options:
    """Options from argv; the user and password may come from HUTCH_PERF_TEST_USERNAME and
    HUTCH_PERF_TEST_PASSWORD (a Job reads them from the Broker's Secret, not from its spec)."""
    parser = _Parser(prog="python -m hutch_cli.perftest", add_help=False)
    parser.add_argument("--uri", "-h", required=True)
    parser.add_argument("-x", "--producers", type=_positive, default=1)
    parser.add_argument("-y", "--consumers", type=_positive, default=1)
    parser.add_argument("-z", "--time", type=float, default=10.0, dest="seconds")
    parser.add_argument("-s", "--size", type=_positive, default=12)
    parser.add_argument("-u", "--queue", default="")
    parser.add_argument("-c", "--confirm", type=_positive, default=0)
    parser.add_argument("-q", "--qos", type=_positive, default=100, dest="prefetch")
    parser.add_argument("-C", "--pmessages", type=_positive, default=0, dest="messages")
    parser.add_argument("-f", "--flag", action="append", default=[])
    parser.add_argument("--cacert")
    parser.add_argument("--server-name")
    found = parser.parse_args(argv)
    if found.producers == 0 and found.consumers == 0:
        raise OptionsError("nothing to do: -x 0 and -y 0")
    if not 0 < found.seconds <= 3600:
        raise OptionsError(f"-z must be between 0 and 3600 seconds, not {found.seconds}")
    unknown = [flag for flag in found.flag if flag not in ("persistent", "mandatory")]
    if unknown:
        raise OptionsError(f"unknown -f flag(s): {', '.join(unknown)} (persistent is known)")
    uri = _with_credentials(found.uri, env or {})
    if urllib.parse.urlsplit(uri).scheme not in ("amqp", "amqps"):
        raise OptionsError(f"--uri must be amqp:// or amqps://, not {found.uri!r}")
    return Options(
        uri=uri, producers=found.producers, consumers=found.consumers, seconds=found.seconds,
        size=max(found.size, 8), queue=found.queue, confirm=found.confirm,
        prefetch=found.prefetch, messages=found.messages,
        persistent="persistent" in found.flag, cacert=found.cacert,
        server_name=found.server_name,
    )  # fmt: skip


def _with_credentials(uri: str, env: dict[str, str]) -> str:
    user, password = env.get("HUTCH_PERF_TEST_USERNAME"), env.get("HUTCH_PERF_TEST_PASSWORD")
    parts = urllib.parse.urlsplit(uri)
    if not user or parts.username:
        return uri
    quoted = f"{urllib.parse.quote(user, safe='')}:{urllib.parse.quote(password or '', safe='')}"
    return urllib.parse.urlunsplit(parts._replace(netloc=f"{quoted}@{parts.netloc}"))


def default_queue() -> str:
    return f"perf-test-{os.urandom(4).hex()}"


@dataclass
class Figures:
    """Counters the connections update; latencies in microseconds, one per received message."""

    sent: int = 0
    confirmed: int = 0
    nacked: int = 0
    received: int = 0
    returned: int = 0
    latencies: list[int] = field(default_factory=list)


def percentile(sorted_values: list[int], fraction: float) -> int:
    if not sorted_values:
        return 0
    index = max(0, math.ceil(fraction * len(sorted_values)) - 1)
    return sorted_values[min(index, len(sorted_values) - 1)]


def latency_text(latencies: list[int]) -> str:
    ordered = sorted(latencies)
    points = [percentile(ordered, f) for f in (0.0, 0.5, 0.75, 0.95, 0.99)]
    points[0] = ordered[0] if ordered else 0
    return "/".join(str(p) for p in points)


def tick_line(elapsed: float, sent: int, received: int, latencies: list[int]) -> str:
    """One line a second, as PerfTest prints them (the counts are this second's)."""
    return (
        f"time {elapsed:.3f} s, sent: {sent} msg/s, received: {received} msg/s, "
        f"min/median/75th/95th/99th consumer latency: {latency_text(latencies)} µs"
    )


def summary_lines(options: Options, figures: Figures, seconds: float) -> list[str]:
    rate = (lambda n: round(n / seconds)) if seconds > 0 else (lambda n: 0)
    lines = [
        f"test stopped after {seconds:.1f} s: {options.producers} producer(s), "
        f"{options.consumers} consumer(s), {options.size} B messages"
        f"{', persistent' if options.persistent else ''}"
        f"{f', confirm window {options.confirm}' if options.confirm else ''}",
        f"sent: {figures.sent} messages, sending rate avg: {rate(figures.sent)} msg/s",
    ]
    if options.confirm:
        lines.append(f"confirmed: {figures.confirmed}, nacked: {figures.nacked}")
    lines += [
        f"received: {figures.received} messages, receiving rate avg: "
        f"{rate(figures.received)} msg/s",
        f"consumer latency min/median/75th/95th/99th: {latency_text(figures.latencies)} µs",
    ]
    return lines
