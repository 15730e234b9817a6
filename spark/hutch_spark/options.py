"""Validation of the `hutch` data source options: pure functions, no Spark and no broker.

Why a separate module: options arrive as strings (Spark lower-cases their keys) and a mistake
should fail when the query is defined, with a message naming the option, the value and the
allowed range, not minutes later inside a Python worker. Keeping the rules pure lets the
table-driven tests cover every rule without starting Spark (docs/contracts/spark.md#options).

Credentials are deliberately *not* resolved here: options are pickled into query plans and
shown by `explain()`, so user names and passwords come from the environment
(`HUTCH_AMQP_USERNAME`/`HUTCH_AMQP_PASSWORD`) in the process that connects (connections.py).
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

from hutch_spark.errors import HutchOptionError

DEFAULT_URI = "amqp://localhost:5672/%2F"
URI_ENV = "HUTCH_AMQP_URI"
CA_FILE_ENV = "HUTCH_AMQP_CA_FILE"  # a CA bundle mounted from the Broker's TLS Secret

MAX_UINT16 = 65535  # basic.qos prefetch-count is a 16-bit field
MIB = 1024 * 1024
BATCH_MODES = ("peek", "drain")

# Spark adds these to the options of some reads and writes (queryName to a streaming sink's);
# they are not ours to reject.
_SPARK_OPTIONS = frozenset({"path", "checkpointlocation", "queryname"})

MAX_QUEUES = 64  # one consumer thread and connection each, in the driver's runner process

SOURCE_OPTIONS = (
    "queue",
    "queues",
    "uri",
    "maxMessagesPerBatch",
    "prefetch",
    "maxBytesPerBatch",
    "numPartitions",
    "pollTimeoutMs",
    "exclusive",
    "consumerTimeoutMs",
    "durableBatches",
    "batchLogDir",
    "maxMessages",
    "batchMode",
    "caFile",
)
SINK_OPTIONS = (
    "uri",
    "caFile",
    "exchange",
    "routingKey",
    "mandatory",
    "persistent",
    "confirmWindow",
    "idPrefix",
)


@dataclass(frozen=True)
class SourceOptions:
    """Settings of the streaming source and of the batch reader (one option set for both).

    `queues` holds every queue read (one consumer each); `queue` is the first. Offsets keep
    the single-queue shape `{"queue", "seq"}` unless the `queues` option was used
    (`per_queue_offsets`): then `{"queues": {name: seq, ...}}`.
    """

    queue: str
    uri: str
    max_messages_per_batch: int
    prefetch: int
    max_bytes_per_batch: int
    num_partitions: int
    poll_timeout_ms: int
    exclusive: bool
    consumer_timeout_ms: int | None
    durable_batches: bool
    batch_log_dir: str | None
    max_messages: int
    batch_mode: str
    queues: tuple[str, ...] = ()
    per_queue_offsets: bool = False
    ca_file: str | None = None  # amqps:// only: the CA bundle to verify the broker with

    def __post_init__(self) -> None:
        if not self.queues:
            object.__setattr__(self, "queues", (self.queue,))


@dataclass(frozen=True)
class SinkOptions:
    """Settings of the sink (`df.write` and `writeStream` with `format("hutch")`)."""

    uri: str
    exchange: str
    routing_key: str
    mandatory: bool
    persistent: bool
    confirm_window: int
    id_prefix: str | None
    ca_file: str | None = None


def parse_source_options(options: Mapping[str, str]) -> SourceOptions:
    """Validates the source options; raises HutchOptionError naming the first bad one."""
    raw = _normalise(options, SOURCE_OPTIONS)
    queues = _queues(raw)
    batch = _integer(raw, "maxMessagesPerBatch", default=1000, low=1, high=MAX_UINT16)
    prefetch = _integer(raw, "prefetch", default=min(2 * batch, MAX_UINT16), low=1, high=MAX_UINT16)
    if prefetch < batch:
        raise HutchOptionError(
            f"hutch: option 'prefetch' = {prefetch} must be >= maxMessagesPerBatch ({batch}); "
            "a smaller prefetch can never fill a batch"
        )
    durable = _boolean(raw, "durableBatches", default=False)
    batch_log_dir = raw.get("batchLogDir")
    if durable and not batch_log_dir:
        raise HutchOptionError(
            "hutch: option 'batchLogDir' is required when durableBatches=true "
            "(recommended: <checkpointLocation>/hutch-batches, a POSIX path on the driver)"
        )
    if batch_log_dir is not None and "://" in batch_log_dir:
        raise HutchOptionError(
            f"hutch: option 'batchLogDir' = {batch_log_dir!r} must be a local POSIX path "
            "on the driver, not a URL"
        )
    batch_mode = raw.get("batchMode", "peek").strip().lower()
    if batch_mode not in BATCH_MODES:
        raise HutchOptionError(
            f"hutch: option 'batchMode' = {raw['batchMode']!r} must be one of "
            f"{', '.join(BATCH_MODES)}"
        )
    consumer_timeout = (
        _integer(raw, "consumerTimeoutMs", default=0, low=1, high=2**31 - 1)
        if "consumerTimeoutMs" in raw
        else None
    )
    return SourceOptions(
        queue=queues[0],
        queues=queues,
        per_queue_offsets="queues" in raw,
        uri=_uri(raw),
        max_messages_per_batch=batch,
        prefetch=prefetch,
        max_bytes_per_batch=_integer(
            raw, "maxBytesPerBatch", default=16 * MIB, low=1, high=64 * MIB
        ),
        num_partitions=_integer(raw, "numPartitions", default=1, low=1, high=256),
        poll_timeout_ms=_integer(raw, "pollTimeoutMs", default=200, low=0, high=10_000),
        exclusive=_boolean(raw, "exclusive", default=False),
        consumer_timeout_ms=consumer_timeout,
        durable_batches=durable,
        batch_log_dir=batch_log_dir,
        max_messages=_integer(raw, "maxMessages", default=1000, low=1, high=MAX_UINT16),
        batch_mode=batch_mode,
        ca_file=_ca_file(raw),
    )


def parse_sink_options(options: Mapping[str, str], *, overwrite: bool = False) -> SinkOptions:
    """Validates the sink options; the sink is append-only, so overwrite is an error."""
    if overwrite:
        raise HutchOptionError(
            "hutch: the sink supports append only (an exchange cannot be overwritten); "
            "use mode('append') or outputMode('append'/'update')"
        )
    raw = _normalise(options, SINK_OPTIONS)
    exchange = raw.get("exchange")
    if exchange is None:
        raise HutchOptionError(
            "hutch: option 'exchange' is required; pass exchange='' explicitly for the "
            "default exchange"
        )
    if len(exchange.encode("utf-8")) > 255:
        raise HutchOptionError(f"hutch: option 'exchange' = {exchange[:40]!r}... exceeds 255 bytes")
    routing_key = raw.get("routingKey", "")
    if len(routing_key.encode("utf-8")) > 255:
        raise HutchOptionError("hutch: option 'routingKey' exceeds 255 bytes")
    id_prefix = raw.get("idPrefix")
    if id_prefix is not None and not 1 <= len(id_prefix) <= 128:
        raise HutchOptionError(
            f"hutch: option 'idPrefix' = {id_prefix!r} must be 1 to 128 characters"
        )
    return SinkOptions(
        uri=_uri(raw),
        exchange=exchange,
        routing_key=routing_key,
        mandatory=_boolean(raw, "mandatory", default=True),
        persistent=_boolean(raw, "persistent", default=True),
        confirm_window=_integer(raw, "confirmWindow", default=256, low=1, high=10_000),
        id_prefix=id_prefix,
        ca_file=_ca_file(raw),
    )


def redact_uri(uri: str) -> str:
    """The URI with any password replaced by ***, for messages and logs."""
    parts = urlsplit(uri)
    if parts.password is None:
        return uri
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return parts._replace(netloc=netloc).geturl()


def _normalise(options: Mapping[str, str], known: tuple[str, ...]) -> dict[str, str]:
    """Maps Spark's lower-cased keys back to the documented names; rejects unknown keys."""
    canonical = {name.lower(): name for name in known}
    result: dict[str, str] = {}
    for key, value in options.items():
        lowered = key.lower()
        if lowered in _SPARK_OPTIONS:
            continue
        name = canonical.get(lowered)
        if name is None:
            close = difflib.get_close_matches(lowered, list(canonical), n=1)
            hint = f"did you mean {canonical[close[0]]!r}? " if close else ""
            raise HutchOptionError(
                f"hutch: unknown option {key!r}; {hint}known options: {', '.join(known)}"
            )
        result[name] = str(value)
    return result


def _queues(raw: Mapping[str, str]) -> tuple[str, ...]:
    """`queue` (one name, taken verbatim) or `queues` (a comma list), never both."""
    if "queue" in raw and "queues" in raw:
        raise HutchOptionError("hutch: give either option 'queue' or option 'queues', not both")
    if "queue" in raw:
        _check_queue_name(raw["queue"], "queue")
        return (raw["queue"],)
    if "queues" not in raw:
        raise HutchOptionError(
            "hutch: option 'queue' is required (the queue to consume from; or 'queues', "
            "a comma list of queues)"
        )
    names = tuple(name.strip() for name in raw["queues"].split(","))
    for name in names:
        _check_queue_name(name, "queues")
    if len(set(names)) != len(names):
        raise HutchOptionError(f"hutch: option 'queues' = {raw['queues']!r} names a queue twice")
    if len(names) > MAX_QUEUES:
        raise HutchOptionError(
            f"hutch: option 'queues' names {len(names)} queues (allowed: 1 to {MAX_QUEUES})"
        )
    return names


def _check_queue_name(queue: str, option: str) -> None:
    size = len(queue.encode("utf-8"))
    if not 1 <= size <= 255:
        raise HutchOptionError(
            f"hutch: option {option!r} = {queue[:40]!r} must be 1 to 255 bytes of UTF-8 "
            f"(got {size})"
        )


def _integer(raw: Mapping[str, str], name: str, *, default: int, low: int, high: int) -> int:
    text = raw.get(name)
    if text is None:
        return default
    try:
        value = int(text.strip())
    except ValueError:
        raise HutchOptionError(
            f"hutch: option {name!r} = {text!r} is not an integer (allowed: {low} to {high})"
        ) from None
    if not low <= value <= high:
        raise HutchOptionError(
            f"hutch: option {name!r} = {value} is out of range (allowed: {low} to {high})"
        )
    return value


def _boolean(raw: Mapping[str, str], name: str, *, default: bool) -> bool:
    text = raw.get(name)
    if text is None:
        return default
    lowered = text.strip().lower()
    if lowered not in ("true", "false"):
        raise HutchOptionError(f"hutch: option {name!r} = {text!r} must be true or false")
    return lowered == "true"


def _ca_file(raw: Mapping[str, str]) -> str | None:
    """``caFile``, else ``$HUTCH_AMQP_CA_FILE`` for an ``amqps://`` uri: a path, not a secret,
    so it may travel in the options.

    Not opened here: the driver that defines the query may not have the file its executors
    mount; a missing file fails the first connection with OpenSSL's own message. The option
    with a plain ``amqp://`` uri is refused (it would silently not be used); the variable,
    set for a whole deployment, is then ignored.
    """
    tls = urlsplit(_uri(raw)).scheme == "amqps"
    path = raw.get("caFile")
    if path is not None and not tls:
        raise HutchOptionError(
            f"hutch: option 'caFile' = {path!r} needs an amqps:// uri (TLS), not "
            f"{redact_uri(_uri(raw))!r}"
        )
    if not tls:
        return None
    return path or os.environ.get(CA_FILE_ENV) or None


def _uri(raw: Mapping[str, str]) -> str:
    uri = raw.get("uri") or os.environ.get(URI_ENV) or DEFAULT_URI
    parts = urlsplit(uri)
    shown = redact_uri(uri)
    if parts.scheme not in ("amqp", "amqps"):
        raise HutchOptionError(
            f"hutch: option 'uri' = {shown!r} must start with amqp:// or amqps://"
        )
    if not parts.hostname:
        raise HutchOptionError(f"hutch: option 'uri' = {shown!r} has no host")
    try:
        port = parts.port
    except ValueError:
        raise HutchOptionError(f"hutch: option 'uri' = {shown!r} has an invalid port") from None
    if port == 0:
        raise HutchOptionError(f"hutch: option 'uri' = {shown!r} has an invalid port")
    return uri
