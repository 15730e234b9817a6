"""Options of the stream-queue source (`format("hutch")` with option `streams`): pure rules.

Why a module of its own: a stream is read by offset, not consumed and acked, so most of the
classic source's options (`prefetch` as back-pressure, `durableBatches`, `batchMode`, ...) mean
nothing here, and the options that do mean something are Spark's Kafka source's, with its names
and meanings where the concept is the same (docs/spark.md, "Reading stream queues"):
`startingOffsets`, `startingTimestamp`, `startingOffsetsByTimestamp`, `endingOffsets`,
`endingTimestamp`, `endingOffsetsByTimestamp`, `startingOffsetsByTimestampStrategy`,
`maxOffsetsPerTrigger`, `failOnDataLoss`. Keeping the rules
pure lets table tests cover each without Spark or a broker, and a mistake fails when the query is
defined with a message naming the option and the allowed values.

Offsets given in JSON use Kafka's markers: -2 is the earliest offset the stream holds, -1 the
latest (its next offset); `{"orders-0": 120, "orders-1": -2}`. Moments in JSON are milliseconds
since the epoch, one per stream: `{"orders-0": 1700000000000, "orders-1": 1700000060000}`.

Where Kafka's source takes several ways of giving one bound and lets one win
(`startingTimestamp` over `startingOffsetsByTimestamp` over `startingOffsets`), this source
refuses two at once: a query that names both almost always has a stale one, and the error
says which.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

from hutch_spark import options
from hutch_spark.errors import HutchOptionError

EARLIEST = -2  # Kafka's JSON markers
LATEST = -1
MAX_STREAMS = 256
MAX_OFFSET = 2**63 - 1
MAX_MOMENT_MS = 253_402_300_799_999  # 9999-12-31T23:59:59.999Z, the calendar's last moment

STREAM_OPTIONS = (
    "streams",
    "superStream",
    "uri",
    "caFile",
    "managementUri",
    "startingOffsets",
    "startingTimestamp",
    "startingOffsetsByTimestamp",
    "startingOffsetsByTimestampStrategy",
    "endingOffsets",
    "endingTimestamp",
    "endingOffsetsByTimestamp",
    "maxOffsetsPerTrigger",
    "failOnDataLoss",
    "numPartitions",
    "prefetch",
    "readTimeoutMs",
)

# An offset spec: "earliest", "latest", or one offset (or marker) per stream.
OffsetSpec = str | dict[str, int]
# A moment spec: one moment (ms since the epoch) for every stream, or one per stream.
Moments = int | dict[str, int]

STRATEGIES = ("error", "latest")  # startingOffsetsByTimestampStrategy, as Kafka's


@dataclass(frozen=True)
class StreamOptions:
    """Settings of the stream source (`readStream`) and the stream batch reader (`read`)."""

    streams: tuple[str, ...]
    uri: str
    management_uri: str
    starting_offsets: OffsetSpec | None  # None: the mode's default (latest / earliest)
    ending_offsets: OffsetSpec | None  # batch reads only; None: latest
    max_offsets_per_trigger: int | None
    fail_on_data_loss: bool
    num_partitions: int
    prefetch: int
    read_timeout_ms: int
    ca_file: str | None = None
    starting_timestamp: Moments | None = None  # instead of startingOffsets
    ending_timestamp: Moments | None = None  # instead of endingOffsets; batch reads only
    timestamp_strategy: str = "error"  # no message at or after a starting moment: fail
    super_stream: str | None = None  # streams are its partitions, found when the query starts


def is_stream_read(raw: Mapping[str, str]) -> bool:
    """True when the options select the stream source (`streams` or `superStream`, any case)."""
    return any(key.lower() in ("streams", "superstream") for key in raw)


def parse_stream_options(raw_options: Mapping[str, str]) -> StreamOptions:
    """Validates the stream source's options; raises HutchOptionError naming the first bad one."""
    raw = options._normalise(raw_options, STREAM_OPTIONS)
    if ("streams" in raw) == ("superStream" in raw):
        raise HutchOptionError(
            "hutch: give either option 'streams' (a comma list of stream queues) or option "
            "'superStream' (an exchange whose bound streams are its partitions), not both"
        )
    super_stream = raw.get("superStream")
    if super_stream is not None:
        _check_name("superStream", super_stream)
    streams = () if super_stream is not None else _streams(raw["streams"])
    uri = options._uri(raw)
    starting = raw.get("startingOffsets")
    ending = raw.get("endingOffsets")
    _one_of(raw, ("startingOffsets", "startingTimestamp", "startingOffsetsByTimestamp"))
    _one_of(raw, ("endingOffsets", "endingTimestamp", "endingOffsetsByTimestamp"))
    strategy = raw.get("startingOffsetsByTimestampStrategy", "error").strip().lower()
    if strategy not in STRATEGIES:
        raise HutchOptionError(
            f"hutch: option 'startingOffsetsByTimestampStrategy' = "
            f"{raw['startingOffsetsByTimestampStrategy'][:40]!r} must be 'error' or 'latest'"
        )
    max_offsets = raw.get("maxOffsetsPerTrigger")
    return StreamOptions(
        streams=streams,
        uri=uri,
        management_uri=_management_uri(raw.get("managementUri"), uri),
        starting_offsets=None if starting is None else _offsets(starting, streams, ending=False),
        ending_offsets=None if ending is None else _offsets(ending, streams, ending=True),
        max_offsets_per_trigger=None
        if max_offsets is None
        else options._integer(raw, "maxOffsetsPerTrigger", default=0, low=1, high=MAX_OFFSET),
        fail_on_data_loss=options._boolean(raw, "failOnDataLoss", default=True),
        num_partitions=options._integer(raw, "numPartitions", default=1, low=1, high=256),
        prefetch=options._integer(raw, "prefetch", default=1000, low=1, high=options.MAX_UINT16),
        read_timeout_ms=options._integer(
            raw, "readTimeoutMs", default=60_000, low=100, high=3_600_000
        ),
        ca_file=options._ca_file(raw),
        starting_timestamp=_moments(raw, "startingTimestamp", streams),
        ending_timestamp=_moments(raw, "endingTimestamp", streams),
        timestamp_strategy=strategy,
        super_stream=super_stream,
    )


def with_streams(settings: StreamOptions, streams: tuple[str, ...]) -> StreamOptions:
    """The settings of a `superStream` once its partitions are known (streambounds.py): its
    offsets in JSON must then name exactly those streams."""
    for name, spec in (
        ("startingOffsets", settings.starting_offsets),
        ("endingOffsets", settings.ending_offsets),
    ):
        if isinstance(spec, dict):
            _check_names(name, spec, streams, ending=name == "endingOffsets")
    for name, moments in (
        ("startingOffsetsByTimestamp", settings.starting_timestamp),
        ("endingOffsetsByTimestamp", settings.ending_timestamp),
    ):
        if isinstance(moments, dict):
            _check_names(name, moments, streams, ending=False, what="moment")
    return dataclasses.replace(settings, streams=streams)


def moments_of(spec: Moments, streams: tuple[str, ...]) -> dict[str, int]:
    """Each stream's moment: the one moment of `startingTimestamp`/`endingTimestamp` for every
    stream, or the JSON's own per stream."""
    if isinstance(spec, int):
        return dict.fromkeys(streams, spec)
    return {stream: spec[stream] for stream in streams}


def check_streaming(settings: StreamOptions) -> None:
    """An end belongs to batch reads: a stream has no end (Kafka refuses it too)."""
    if settings.ending_offsets is not None:
        name = "endingOffsets"
    elif isinstance(settings.ending_timestamp, int):
        name = "endingTimestamp"
    elif settings.ending_timestamp is not None:
        name = "endingOffsetsByTimestamp"
    else:
        return
    raise HutchOptionError(
        f"hutch: option {name!r} is for batch reads (spark.read) only; a streaming "
        "query reads until it is stopped (use trigger(availableNow=True) to stop at the "
        "streams' ends)"
    )


def check_batch(settings: StreamOptions) -> None:
    """A batch read has no trigger, so a per-trigger limit would silently mean nothing."""
    if settings.max_offsets_per_trigger is not None:
        raise HutchOptionError(
            "hutch: option 'maxOffsetsPerTrigger' is for streaming queries only; a batch read "
            "reads [startingOffsets, endingOffsets)"
        )


def _streams(text: str) -> tuple[str, ...]:
    names = tuple(name.strip() for name in text.split(","))
    for name in names:
        size = len(name.encode("utf-8"))
        if not 1 <= size <= 255:
            raise HutchOptionError(
                f"hutch: option 'streams' = {text[:80]!r} holds the name {name[:40]!r}: each "
                f"stream name must be 1 to 255 bytes of UTF-8 (got {size})"
            )
    if len(set(names)) != len(names):
        raise HutchOptionError(f"hutch: option 'streams' = {text!r} names a stream twice")
    if len(names) > MAX_STREAMS:
        raise HutchOptionError(
            f"hutch: option 'streams' names {len(names)} streams (allowed: 1 to {MAX_STREAMS})"
        )
    return names


def _offsets(text: str, streams: tuple[str, ...], *, ending: bool) -> OffsetSpec:
    """`earliest`, `latest` or Kafka-style JSON `{"stream": offset, ...}` covering every
    stream; -2 (earliest) is refused as an end, as in Kafka."""
    name = "endingOffsets" if ending else "startingOffsets"
    words = ("latest",) if ending else ("earliest", "latest")
    lowered = text.strip().lower()
    if lowered in words:
        return lowered
    allowed = " or ".join(repr(word) for word in words)
    markers = "-1 (latest)" if ending else "-2 (earliest), -1 (latest)"
    try:
        parsed = json.loads(text)
    except ValueError:
        parsed = None
    if not isinstance(parsed, dict):
        raise HutchOptionError(
            f"hutch: option {name!r} = {text[:80]!r} must be {allowed} or a JSON object of "
            f"an offset per stream, such as {{{json.dumps(streams[0])}: 0}}"
        )
    if streams:  # a superStream's partitions are checked once they are known
        _check_names(name, parsed, streams, ending=ending)
    low = LATEST if ending else EARLIEST
    result: dict[str, int] = {}
    for stream in parsed:
        value = parsed[stream]
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= MAX_OFFSET:
            raise HutchOptionError(
                f"hutch: option {name!r} gives stream {stream!r} the offset {value!r}: it must "
                f"be an offset >= 0 or {markers}"
            )
        result[stream] = value
    return result


def _check_names(
    name: str,
    parsed: Mapping[str, object],
    streams: tuple[str, ...],
    *,
    ending: bool,
    what: str = "offset",
) -> None:
    markers = "-1 (latest)" if ending else "-2 (earliest), -1 (latest)"
    extra = sorted(set(parsed) - set(streams))
    missing = [stream for stream in streams if stream not in parsed]
    if extra:
        raise HutchOptionError(
            f"hutch: option {name!r} names {extra!r}, which are not among the streams read "
            f"{list(streams)!r}"
        )
    if missing:
        allowed = f" ({markers} allowed)" if what == "offset" else ""
        raise HutchOptionError(
            f"hutch: option {name!r} gives no {what} for stream(s) {missing!r}; "
            f"give one for every stream{allowed}"
        )


def _one_of(raw: Mapping[str, str], names: tuple[str, ...]) -> None:
    """At most one way of giving a bound (Kafka lets one win; here both are refused)."""
    given = [name for name in names if name in raw]
    if len(given) > 1:
        raise HutchOptionError(
            f"hutch: give only one of the options {', '.join(repr(n) for n in names)} "
            f"(got {' and '.join(repr(n) for n in given)})"
        )


def _moments(raw: Mapping[str, str], name: str, streams: tuple[str, ...]) -> Moments | None:
    """`startingTimestamp` (one moment, milliseconds since the epoch) or
    `startingOffsetsByTimestamp` (JSON, one per stream), and the same for the end."""
    if name in raw:
        return options._integer(raw, name, default=0, low=0, high=MAX_MOMENT_MS)
    by_stream = name.replace("Timestamp", "OffsetsByTimestamp")
    text = raw.get(by_stream)
    if text is None:
        return None
    try:
        parsed = json.loads(text)
    except ValueError:
        parsed = None
    example = json.dumps(streams[0]) if streams else '"orders-0"'
    if not isinstance(parsed, dict):
        raise HutchOptionError(
            f"hutch: option {by_stream!r} = {text[:80]!r} must be a JSON object of a moment "
            f"(milliseconds since the epoch) per stream, such as {{{example}: 1700000000000}}"
        )
    if streams:  # a superStream's partitions are checked once they are known
        _check_names(by_stream, parsed, streams, ending=False, what="moment")
    result: dict[str, int] = {}
    for stream, value in parsed.items():
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_MOMENT_MS:
            raise HutchOptionError(
                f"hutch: option {by_stream!r} gives stream {stream!r} the moment {value!r}: it "
                f"must be milliseconds since the epoch, 0 to {MAX_MOMENT_MS}"
            )
        result[stream] = value
    return result


def _check_name(option: str, name: str) -> None:
    size = len(name.encode("utf-8"))
    if not 1 <= size <= 255:
        raise HutchOptionError(
            f"hutch: option {option!r} = {name[:40]!r} must be 1 to 255 bytes of UTF-8 (got {size})"
        )


def _management_uri(given: str | None, amqp_uri: str) -> str:
    """`managementUri`, else the AMQP broker's host on the management port (15672, or 15671
    with TLS), which is where hutch-broker and RabbitMQ serve it by default."""
    if given is None:
        parts = urlsplit(amqp_uri)
        tls = parts.scheme == "amqps"
        host = parts.hostname or "localhost"
        if ":" in host:
            host = f"[{host}]"
        return f"{'https' if tls else 'http'}://{host}:{15671 if tls else 15672}"
    parts = urlsplit(given)
    shown = options.redact_uri(given)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise HutchOptionError(
            f"hutch: option 'managementUri' = {shown!r} must be an http:// or https:// URL "
            "with a host (the broker's management API)"
        )
    try:
        parts.port  # noqa: B018 - parsing it is the check
    except ValueError:
        raise HutchOptionError(
            f"hutch: option 'managementUri' = {shown!r} has an invalid port"
        ) from None
    return given.rstrip("/")
