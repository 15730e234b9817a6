"""The benchmark scenarios, defined once for every load generator.

Why: the benchmark compares brokers, so PerfTest and our own asyncio load generator must put the
same load on RabbitMQ 3.10.8 and on hutch-broker: same queues, bindings, body size, confirm window,
prefetch and ack batching. Each tool translates a `Scenario` into its own terms (bench/perftest.py,
bench/loadgen.py); the topology (queues, exchange, bindings) is declared by loadgen for both, and
the vhosts a scenario splits its pairs over are created by bench/run.py on each broker.
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
    # Independent pairs: producer i publishes only routing_keys[i], queue i's name on the default
    # exchange, and queue i has one consumer of its own; no queue or connection is shared.
    pairs: bool = False
    # The pairs split over these vhosts in equal consecutive runs (bench/run.py creates them on
    # both brokers before the run); empty: everything in the URL's vhost.
    vhosts: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.pairs and not (
            self.producers == len(self.queues) == len(self.routing_keys)
            and self.consumers_per_queue == 1
            and not self.exchange
        ):
            raise ValueError(
                f"scenario {self.number}: pairs need one producer, one routing key and one "
                "consumer per queue, on the default exchange"
            )
        if self.vhosts and (not self.pairs or len(self.queues) % len(self.vhosts)):
            raise ValueError(
                f"scenario {self.number}: vhosts split pairs evenly: {len(self.queues)} queues "
                f"over {len(self.vhosts)} vhosts"
            )

    @property
    def consumers(self) -> int:
        return self.consumers_per_queue * len(self.queues)

    def vhost_of(self, queue_index: int) -> str | None:
        """The vhost of queue (and pair) ``queue_index``; None: the URL's."""
        if not self.vhosts:
            return None
        return self.vhosts[queue_index * len(self.vhosts) // len(self.queues)]

    def queues_by_vhost(self) -> dict[str | None, list[str]]:
        """The queues in each vhost (None: the URL's), in order."""
        placed: dict[str | None, list[str]] = {}
        for index, queue in enumerate(self.queues):
            placed.setdefault(self.vhost_of(index), []).append(queue)
        return placed

    def producer_routing_keys(self) -> list[tuple[str | None, tuple[str, ...]]]:
        """Each producer's vhost (None: the URL's) and the routing keys it cycles through."""
        if self.pairs:
            return [(self.vhost_of(index), (key,)) for index, key in enumerate(self.routing_keys)]
        return [(None, self.routing_keys)] * self.producers


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


PAIRS = 4
# Named so that hutch-broker --vhost-workers 2 (or 4) puts them in different workers (CRC-32 of
# the name modulo the workers, server/listener.py): "bench-v0" and "bench-v1" share one in both.
PAIR_VHOSTS = ("bench-one", "bench-two")


def pair_queues(number: int) -> tuple[str, ...]:
    return tuple(f"bench.s{number}.q{index}" for index in range(PAIRS))


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
    # Issue #32's yardstick for a broker on more than one core: four flows that share nothing.
    4: Scenario(
        number=4,
        title="4 independent producer -> queue -> consumer pairs; as 1 otherwise",
        queues=pair_queues(4),
        routing_keys=pair_queues(4),
        producers=PAIRS,
        pairs=True,
    ),
    5: Scenario(  # "4v"
        number=5,
        title="as 4, the pairs split over 2 vhosts (2 each)",
        queues=pair_queues(5),
        routing_keys=pair_queues(5),
        producers=PAIRS,
        pairs=True,
        vhosts=PAIR_VHOSTS,
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
