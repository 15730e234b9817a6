"""The documented differences between hutch-broker and RabbitMQ 3.10.8, as one table.

Why: the side-by-side suite asserts that a client observes the same thing on both brokers. Where
the behaviour contract's table of differences (docs/contracts/broker.md#differences) says Hutch
deliberately differs, a test must not quietly special-case the broker: it names the row here with
`expect(...)`, so every exception is visible in one place and each one points at the contract row
that justifies it. Both brokers offer the same SASL mechanisms, so that topic has no entry.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, TypeVar

T = TypeVar("T")

HUTCH, RABBITMQ = "hutch", "rabbitmq"


@dataclass(frozen=True)
class Difference:
    topic: str  # the topic of the row in the contract's table
    hutch: str
    rabbitmq: str
    section: str = "docs/contracts/broker.md#differences"


DIFFERENCES: Final[dict[str, Difference]] = {
    "cc-with-dead-letter-routing-key": Difference(
        "`CC` header when a dead-letter routing key is set",
        "kept, but not used for routing (4.x)",
        "removed ◆",
    ),
    "x-last-death-headers": Difference(
        "`x-last-death-reason/queue/exchange`",
        "set on every death (4.x)",
        "absent",
    ),
    "publisher-x-death": Difference(
        "`x-death` set by the publisher",
        "replaced by broker history at the first death (4.x)",
        "merged and kept",
    ),
    "unknown-exchange-type": Difference(
        "Unknown exchange type",
        "channel error 406 `PRECONDITION_FAILED - unknown exchange type 'T'` (4.x)",
        "connection error 503 `COMMAND_INVALID - unknown exchange type 'T'` ◆",
    ),
    "default-watermark": Difference(
        "Default watermark",
        "0.4 × `total_memory` (seed; 4.x uses 0.6)",  # noqa: RUF001 - as in the contract
        "0.4 × host RAM ◆",  # noqa: RUF001
    ),
    "watermark-zero": Difference(
        "Watermark 0",
        "monitor off, never blocks (seed)",
        "alarm at once, all publishing blocked (4.x too)",
    ),
    "apply-to-queue-types": Difference(
        "`apply-to` values `classic_queues`, `quorum_queues`, `streams`",
        "accepted (seed)",
        "400 `apply-to '…' unrecognised; should be 'queues', 'exchanges' or 'all'`",
    ),
    "ring-size": Difference(
        "`x-ring-size` / `ring-size`",
        "ring queue (RING-1)",
        "argument ignored; policy key not recognised",
    ),
    "maximum-message-size": Difference("Maximum message size", "16 MiB (4.x)", "128 MiB"),
    "stream-segment-size": Difference(
        "Streams: `x-stream-max-segment-size-bytes`",
        "at most the store's segment size (8 MiB), so retention is finer",
        "as set (default 500 MB)",
    ),
    "quorum-delivery-limit": Difference(
        "Quorum queues: no `x-delivery-limit` / a negative one",
        "20 / no limit (4.x)",
        "no limit / dead-lettered at the first return",
        section="docs/contracts/broker.md#differences",
    ),
    # Observed on 3.10.8 by tests/sidebyside/test_policy_stream_keys.py: its max-age check
    # crashes (500, empty body) on a value without digits or not a string, and stores a list.
    "policy-max-age-crash": Difference(
        'A policy\'s malformed `max-age` (`x`, `""`, `-1D`, a number, a list)',
        "400 `<value> is not a valid max age`",
        "500 with an empty body; a list of strings is stored",
    ),
    "default-queue-type": Difference(
        "A vhost's `default_queue_type` (`quorum`, `stream`)",
        "applied to a typeless declare of a durable, shared, client-named queue (4.x)",
        "stored, reported as `undefined`, every typeless declare classic",
    ),
    # Observed on 3.10.8 by tests/sidebyside/test_write_revoked.py: a channel keeps the write
    # checks it passed (rabbit_channel's permission cache, never expired for internal users).
    "write-narrowed-same-channel": Difference(
        "A write permission narrowed while a channel publishes",
        "refused at the next publish on every channel (403)",
        "a channel that already published to the exchange goes on; a new channel gets 403",
    ),
    "equal-policy-priorities": Difference(
        "Equal policy priorities", "lowest name wins", "unspecified"
    ),
    "management-stats-delay": Difference(
        "Management stats", "immediate", "about 5 s after creation"
    ),
    "policy-error-escaping": Difference(
        "`/api/policies` error reason", "plain text", "HTML-escaped (`&lt;&lt;`)"
    ),
    "binding-properties-key-hash": Difference(
        "Binding `properties_key` hash", "Hutch hash", "Erlang `phash2`"
    ),
    # Observed on 3.10.8 by this suite: DLX-2 says "never BCC", while the
    # reference node routes a dead letter (no DLRK) to its BCC keys too, without listing them in
    # x-death routing-keys. Hutch follows DLX-2.
    "dead-letter-bcc": Difference(
        "BCC keys when dead-lettering without a dead-letter routing key",
        "not used (DLX-2)",
        "used for routing, absent from `routing-keys` (observed)",
        section="docs/contracts/broker.md#differences (DLX-2)",
    ),
    # Observed on 3.10.8 by tests/sidebyside/test_single_active_consumer.py (issue 14, and
    # "Broker trust II" item 6): when the single active consumer of a classic queue cancels
    # while messages are ready, they are not delivered, not even after the old channel acks;
    # the next delivery crashes the queue process ({badmatch,false} in attempt_delivery), which
    # restarts empty: the ready messages, that (confirmed) publish and every consumer are lost.
    # 3.10.8's quorum queues hand over at once, and nothing waits for the old consumer's unacked
    # messages to be settled, on either queue type. Hutch hands over at once on every queue.
    "sac-cancel-handover": Difference(
        "Ready messages when the single active consumer of a classic queue cancels",
        "delivered to the next active consumer at once (as 3.10.8's quorum queues do)",
        "not delivered; the next publish crashes the queue, which restarts empty (observed)",
        section="docs/contracts/broker.md#differences (issue 14)",
    ),
    # Deliberate differences from the "Broker trust" work (issue 11); the section
    # "Differences from RabbitMQ 3.10.8" of docs/broker.md names them too.
    "long-names-over-http": Difference(
        "Exchange names and routing keys over 255 bytes over HTTP",
        "400 (a shortstr cannot carry them to a consumer)",
        "accepted; a message routed with one then closes its consumer's connection with 541",
        section="docs/contracts/broker.md#differences (issue 11, item 8)",
    ),
    "backtracking-patterns": Difference(
        "Policy and permission patterns using backreferences, lookaround, atomic groups",
        "400: patterns are searched in linear time",
        "accepted (backtracking regex)",
        section="docs/contracts/broker.md#differences (issue 11, item 7)",
    ),
    "dead-lettering-across-a-crash": Difference(
        "Dead-lettering across kill -9",
        "at-least-once: may be dead-lettered twice, never lost",
        "at-most-once for classic queues",
        section="docs/contracts/broker.md#differences (issue 11)",
    ),
    "quorum-return-across-a-crash": Difference(
        "A quorum queue's returned (nacked with requeue) message across kill -9",
        "at-least-once: the message may come back twice, never lost",
        "exactly once (the Raft log)",
        section="docs/contracts/broker.md#differences",
    ),
    "queue-memory": Difference(
        "A queue's `memory` in `/api/queues`",
        "its structures, ~290 B a message and the resident bodies and headers",
        "the queue process's heap: bodies over 64 bytes are not in it",
        section="docs/contracts/broker.md#http-api",
    ),
    # Not a row of the table, but an allowance the contract makes for the HTTP API.
    "erlang-internals": Difference(
        "Erlang internals (`backing_queue_status`, `garbage_collection`) may be omitted",
        "omitted",
        "present",
        section="docs/contracts/broker.md#http-api",
    ),
}


def expect(kind: str, key: str, *, hutch: T, rabbitmq: T) -> T:
    """The value a test expects on broker ``kind`` for the documented difference ``key``."""
    if key not in DIFFERENCES:
        raise KeyError(f"{key!r} is not a documented difference (see differences.DIFFERENCES)")
    if kind == HUTCH:
        return hutch
    if kind == RABBITMQ:
        return rabbitmq
    raise ValueError(f"unknown broker kind {kind!r}")
