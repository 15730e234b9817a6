"""The benchmark scenarios, defined once for every load generator.

Why: the benchmark compares brokers, so PerfTest and our own asyncio load generator must put the
same load on RabbitMQ 3.10.8 and on hutch-broker: same queues, bindings, body size, confirm window,
prefetch and ack batching. Each tool translates a `Scenario` into its own terms (bench/perftest.py,
bench/loadgen.py); the topology (queues, exchange, bindings) is declared by loadgen for both.
"""

from __future__ import annotations

import dataclasses

BODY_SIZE = 1024
CONFIRM_WINDOW = 1000
PREFETCH = 1000
ACK_EVERY = 100  # consumers ack with multiple=True every ACK_EVERY deliveries

TOPIC_EXCHANGE = "bench.s3.topic"
TOPIC_QUEUES = 10
TOPIC_WORDS_A = 100  # routing keys are bench.<a>.<b>, a < 100, b < 10: 1,000 keys
TOPIC_WORDS_B = 10
TOPIC_EXACT_B = 8  # exact bindings exist for b < 8


@dataclasses.dataclass(frozen=True)
class Scenario:
    number: int
    title: str
    queues: tuple[str, ...]
    routing_keys: tuple[str, ...]
    exchange: str = ""  # "" is the default exchange: routing key = queue name
    exchange_type: str = "direct"
    bindings: tuple[tuple[str, str], ...] = ()  # (queue, binding key)
    producers: int = 1
    consumers_per_queue: int = 1
    body_size: int = BODY_SIZE
    confirms: bool = False
    confirm_window: int = CONFIRM_WINDOW
    persistent: bool = False  # persistent messages and durable queues (and exchange)
    prefetch: int = PREFETCH
    ack_every: int = ACK_EVERY
    # PerfTest publishes one fixed routing key; the one it uses here (see perftest.py).
    perftest_routing_key: str | None = None

    @property
    def consumers(self) -> int:
        return self.consumers_per_queue * len(self.queues)


def topic_bindings() -> tuple[tuple[str, str], ...]:
    """1,000 bindings over 10 queues: 800 exact, 100 with `*`, 100 with `#`.

    A routing key bench.<a>.<b> matches its exact binding (b < 8), `bench.<a>.*` and `bench.<a>.#`,
    which lead to queues (a + b), (a + 5) and (a + 7) mod 10: each key reaches 1 to 3 queues,
    2.6 on average, and every queue gets the same share.
    """
    bindings = []
    for a in range(TOPIC_WORDS_A):
        for b in range(TOPIC_EXACT_B):
            bindings.append((topic_queue((a + b) % TOPIC_QUEUES), f"bench.{a}.{b}"))
        bindings.append((topic_queue((a + 5) % TOPIC_QUEUES), f"bench.{a}.*"))
        bindings.append((topic_queue((a + 7) % TOPIC_QUEUES), f"bench.{a}.#"))
    return tuple(bindings)


def topic_queue(index: int) -> str:
    return f"bench.s3.q{index}"


def topic_routing_keys() -> tuple[str, ...]:
    return tuple(f"bench.{a}.{b}" for a in range(TOPIC_WORDS_A) for b in range(TOPIC_WORDS_B))


SCENARIOS: dict[int, Scenario] = {
    1: Scenario(
        number=1,
        title="1 producer, 1 queue, 1 consumer; 1 KiB, no confirms, transient",
        queues=("bench.s1",),
        routing_keys=("bench.s1",),
    ),
    2: Scenario(
        number=2,
        title="as 1, with confirms (window 1000), durable queue, persistent messages",
        queues=("bench.s2",),
        routing_keys=("bench.s2",),
        confirms=True,
        persistent=True,
    ),
    3: Scenario(
        number=3,
        title="topic exchange, 1,000 bindings over 10 queues, 1 producer, 10 consumers",
        queues=tuple(topic_queue(index) for index in range(TOPIC_QUEUES)),
        routing_keys=topic_routing_keys(),
        exchange=TOPIC_EXCHANGE,
        exchange_type="topic",
        bindings=topic_bindings(),
        perftest_routing_key="bench.42.3",  # -> queues 5, 7 and 9
    ),
}


def fan_out(scenario: Scenario) -> float:
    """Average number of queues one published message reaches (to check consumed rates)."""
    if not scenario.bindings:
        return 1.0
    reached = [len(_queues_for(key, scenario.bindings)) for key in scenario.routing_keys]
    return sum(reached) / len(reached)


def _queues_for(routing_key: str, bindings: tuple[tuple[str, str], ...]) -> set[str]:
    return {queue for queue, pattern in bindings if topic_matches(pattern, routing_key)}


def topic_matches(pattern: str, routing_key: str) -> bool:
    """AMQP topic matching: `*` is one word, `#` zero or more."""
    return _match(pattern.split("."), routing_key.split("."))


def _match(pattern: list[str], words: list[str]) -> bool:
    if not pattern:
        return not words
    head, rest = pattern[0], pattern[1:]
    if head == "#":
        return any(_match(rest, words[skip:]) for skip in range(len(words) + 1))
    if not words:
        return False
    return (head in ("*", words[0])) and _match(rest, words[1:])
