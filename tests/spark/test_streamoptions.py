"""Every option rule of the stream-queue source (option `streams`), without Spark or a broker.

One table row per rule: options in, the parsed field or the error text out. Spark lower-cases
option keys, so some rows use lower-case keys on purpose.
"""

from typing import Any

import pytest
from hutch_spark import streamoptions
from hutch_spark.errors import HutchOptionError

S = {"streams": "orders-0,orders-1"}

OK: list[tuple[dict[str, str], str, Any]] = [
    (S, "streams", ("orders-0", "orders-1")),
    (S, "super_stream", None),
    ({"superStream": "orders"}, "super_stream", "orders"),
    ({"superstream": "orders"}, "streams", ()),
    ({"superStream": "o", "startingOffsets": '{"o-0": 3}'}, "starting_offsets", {"o-0": 3}),
    ({"STREAMS": " a , b "}, "streams", ("a", "b")),
    ({"streams": "x" * 255}, "streams", ("x" * 255,)),
    (S, "uri", "amqp://localhost:5672/%2F"),
    (S, "management_uri", "http://localhost:15672"),
    ({**S, "uri": "amqp://u:p@broker:5672/vh"}, "management_uri", "http://broker:15672"),
    ({**S, "uri": "amqps://broker:5671/vh"}, "management_uri", "https://broker:15671"),
    ({**S, "managementUri": "http://h:8080/"}, "management_uri", "http://h:8080"),
    (S, "starting_offsets", None),
    ({**S, "startingOffsets": "EARLIEST"}, "starting_offsets", "earliest"),
    ({**S, "startingoffsets": "latest"}, "starting_offsets", "latest"),
    (
        {**S, "startingOffsets": '{"orders-0": 5, "orders-1": -2}'},
        "starting_offsets",
        {"orders-0": 5, "orders-1": -2},
    ),
    (S, "starting_timestamp", None),
    ({**S, "startingTimestamp": "1700000000123"}, "starting_timestamp", 1700000000123),
    (
        {**S, "startingOffsetsByTimestamp": '{"orders-0": 1700000000000, "orders-1": 0}'},
        "starting_timestamp",
        {"orders-0": 1_700_000_000_000, "orders-1": 0},
    ),
    ({**S, "startingtimestamp": "253402300799999"}, "starting_timestamp", 253402300799999),
    (S, "timestamp_strategy", "error"),
    ({**S, "startingOffsetsByTimestampStrategy": " Latest "}, "timestamp_strategy", "latest"),
    (S, "ending_timestamp", None),
    ({**S, "endingTimestamp": "1700000000000"}, "ending_timestamp", 1_700_000_000_000),
    (
        {**S, "endingOffsetsByTimestamp": '{"orders-1": 5, "orders-0": 6}'},
        "ending_timestamp",
        {"orders-0": 6, "orders-1": 5},
    ),
    (
        {"superStream": "o", "endingOffsetsByTimestamp": '{"o-0": 7}'},
        "ending_timestamp",
        {"o-0": 7},
    ),
    (S, "ending_offsets", None),
    ({**S, "endingOffsets": "latest"}, "ending_offsets", "latest"),
    (
        {**S, "endingOffsets": '{"orders-0": 9, "orders-1": -1}'},
        "ending_offsets",
        {"orders-0": 9, "orders-1": -1},
    ),
    (S, "max_offsets_per_trigger", None),
    ({**S, "maxOffsetsPerTrigger": "500"}, "max_offsets_per_trigger", 500),
    (S, "fail_on_data_loss", True),
    ({**S, "failondataloss": "false"}, "fail_on_data_loss", False),
    (S, "num_partitions", 1),
    ({**S, "numPartitions": "256"}, "num_partitions", 256),
    (S, "prefetch", 1000),
    ({**S, "prefetch": "65535"}, "prefetch", 65535),
    (S, "read_timeout_ms", 60_000),
    (
        {**S, "path": "x", "checkpointLocation": "/c", "queryName": "q"},
        "streams",
        S["streams"].split(","),
    ),
]

BAD: list[tuple[dict[str, str], str]] = [
    ({}, "give either option 'streams'"),
    ({**S, "superStream": "orders"}, "give either option 'streams'"),
    ({"superStream": ""}, "'superStream' = '' must be 1 to 255 bytes"),
    ({"streams": ""}, "each stream name must be 1 to 255 bytes"),
    ({"streams": "a,,b"}, "holds the name ''"),
    ({"streams": "a,b,a"}, "names a stream twice"),
    ({"streams": ",".join(f"s{n}" for n in range(257))}, "names 257 streams (allowed: 1 to 256)"),
    (
        {**S, "startingOffsets": "first"},
        "'startingOffsets' = 'first' must be 'earliest' or 'latest' or a JSON object",
    ),
    ({**S, "startingOffsets": "[1, 2]"}, "must be 'earliest' or 'latest' or a JSON object"),
    ({**S, "startingOffsets": '{"orders-0": 1}'}, "gives no offset for stream(s) ['orders-1']"),
    (
        {**S, "startingOffsets": '{"orders-0": 1, "orders-1": 1, "x": 0}'},
        "names ['x'], which are not among the streams read",
    ),
    (
        {**S, "startingOffsets": '{"orders-0": -3, "orders-1": 0}'},
        "gives stream 'orders-0' the offset -3",
    ),
    (
        {**S, "startingOffsets": '{"orders-0": "5", "orders-1": 0}'},
        "the offset '5': it must be an offset >= 0",
    ),
    ({**S, "startingOffsets": '{"orders-0": true, "orders-1": 0}'}, "the offset True"),
    (
        {**S, "endingOffsets": "earliest"},
        "'endingOffsets' = 'earliest' must be 'latest' or a JSON object",
    ),
    (
        {**S, "endingOffsets": '{"orders-0": -2, "orders-1": 0}'},
        "must be an offset >= 0 or -1 (latest)",
    ),
    (
        {**S, "startingOffsets": "earliest", "startingTimestamp": "5"},
        "give only one of the options 'startingOffsets', 'startingTimestamp', "
        "'startingOffsetsByTimestamp' (got 'startingOffsets' and 'startingTimestamp')",
    ),
    (
        {**S, "startingTimestamp": "5", "startingOffsetsByTimestamp": "{}"},
        "(got 'startingTimestamp' and 'startingOffsetsByTimestamp')",
    ),
    (
        {**S, "endingOffsets": "latest", "endingOffsetsByTimestamp": "{}"},
        "(got 'endingOffsets' and 'endingOffsetsByTimestamp')",
    ),
    ({**S, "startingTimestamp": "-1"}, "'startingTimestamp' = -1 is out of range"),
    ({**S, "endingTimestamp": "now"}, "'endingTimestamp' = 'now' is not an integer"),
    (
        {**S, "startingTimestamp": "253402300800000"},
        "'startingTimestamp' = 253402300800000 is out of range (allowed: 0 to 253402300799999)",
    ),
    (
        {**S, "startingOffsetsByTimestamp": "1700000000000"},
        "'startingOffsetsByTimestamp' = '1700000000000' must be a JSON object of a moment "
        '(milliseconds since the epoch) per stream, such as {"orders-0": 1700000000000}',
    ),
    (
        {**S, "startingOffsetsByTimestamp": '{"orders-0": 1}'},
        "'startingOffsetsByTimestamp' gives no moment for stream(s) ['orders-1']; give one "
        "for every stream",
    ),
    (
        {**S, "endingOffsetsByTimestamp": '{"orders-0": 1, "orders-1": 1, "x": 1}'},
        "'endingOffsetsByTimestamp' names ['x'], which are not among the streams read",
    ),
    (
        {**S, "endingOffsetsByTimestamp": '{"orders-0": -1, "orders-1": 1}'},
        "gives stream 'orders-0' the moment -1: it must be milliseconds since the epoch",
    ),
    (
        {**S, "startingOffsetsByTimestamp": '{"orders-0": 1.5, "orders-1": 1}'},
        "the moment 1.5",
    ),
    ({**S, "startingOffsetsByTimestamp": '{"orders-0": false, "orders-1": 1}'}, "moment False"),
    (
        {**S, "startingOffsetsByTimestampStrategy": "earliest"},
        "'startingOffsetsByTimestampStrategy' = 'earliest' must be 'error' or 'latest'",
    ),
    ({**S, "maxOffsetsPerTrigger": "0"}, "'maxOffsetsPerTrigger' = 0 is out of range"),
    ({**S, "failOnDataLoss": "yes"}, "'failOnDataLoss' = 'yes' must be true or false"),
    ({**S, "numPartitions": "0"}, "'numPartitions' = 0 is out of range (allowed: 1 to 256)"),
    ({**S, "prefetch": "65536"}, "'prefetch' = 65536 is out of range"),
    ({**S, "readTimeoutMs": "10"}, "'readTimeoutMs' = 10 is out of range"),
    ({**S, "managementUri": "ftp://h/"}, "must be an http:// or https:// URL with a host"),
    ({**S, "managementUri": "http://:8080"}, "must be an http:// or https:// URL with a host"),
    ({**S, "managementUri": "http://h:x"}, "has an invalid port"),
    ({**S, "uri": "http://h/"}, "must start with amqp:// or amqps://"),
    ({**S, "maxMessagesPerBatch": "10"}, "unknown option 'maxMessagesPerBatch'"),
    ({**S, "startingOffset": "earliest"}, "did you mean 'startingOffsets'?"),
]


@pytest.mark.parametrize(("raw", "field", "expected"), OK)
def test_parses(raw: dict[str, str], field: str, expected: Any) -> None:
    parsed = streamoptions.parse_stream_options(raw)
    value = getattr(parsed, field)
    assert (list(value) if isinstance(expected, list) else value) == expected


@pytest.mark.parametrize(("raw", "message"), BAD)
def test_refuses(raw: dict[str, str], message: str) -> None:
    with pytest.raises(HutchOptionError) as caught:
        streamoptions.parse_stream_options(raw)
    assert message in str(caught.value)


def test_the_stream_option_selects_the_stream_source() -> None:
    assert streamoptions.is_stream_read({"Streams": "a"})
    assert not streamoptions.is_stream_read({"queue": "a"})


def test_a_super_streams_offsets_must_name_its_partitions() -> None:
    settings = streamoptions.parse_stream_options(
        {"superStream": "o", "startingOffsets": '{"o-0": 3, "o-1": -2}'}
    )
    resolved = streamoptions.with_streams(settings, ("o-0", "o-1"))
    assert resolved.streams == ("o-0", "o-1")
    assert resolved.super_stream == "o"
    with pytest.raises(HutchOptionError, match=r"no offset for stream\(s\) \['o-2'\]"):
        streamoptions.with_streams(settings, ("o-0", "o-1", "o-2"))
    with pytest.raises(HutchOptionError, match=r"names \['o-1'\], which are not among"):
        streamoptions.with_streams(settings, ("o-0",))


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("endingOffsets", "latest"),
        ("endingTimestamp", "1700000000000"),
        ("endingOffsetsByTimestamp", '{"orders-0": 1, "orders-1": 2}'),
    ],
)
def test_an_end_is_for_batch_reads_only(option: str, value: str) -> None:
    settings = streamoptions.parse_stream_options({**S, option: value})
    with pytest.raises(HutchOptionError, match=f"'{option}' is for batch reads"):
        streamoptions.check_streaming(settings)
    streamoptions.check_streaming(streamoptions.parse_stream_options(S))
    streamoptions.check_batch(settings)


def test_moments_per_stream() -> None:
    streams = ("a", "b")
    assert streamoptions.moments_of(7, streams) == {"a": 7, "b": 7}
    assert streamoptions.moments_of({"b": 2, "a": 1}, streams) == {"a": 1, "b": 2}


def test_a_super_streams_moments_must_name_its_partitions() -> None:
    settings = streamoptions.parse_stream_options(
        {"superStream": "o", "startingOffsetsByTimestamp": '{"o-0": 3, "o-1": 4}'}
    )
    assert streamoptions.with_streams(settings, ("o-0", "o-1")).starting_timestamp == {
        "o-0": 3,
        "o-1": 4,
    }
    with pytest.raises(HutchOptionError, match=r"no moment for stream\(s\) \['o-2'\]"):
        streamoptions.with_streams(settings, ("o-0", "o-1", "o-2"))
    one = streamoptions.parse_stream_options({"superStream": "o", "endingTimestamp": "3"})
    assert streamoptions.with_streams(one, ("o-0", "o-9")).ending_timestamp == 3


def test_max_offsets_per_trigger_is_for_streaming_only() -> None:
    settings = streamoptions.parse_stream_options({**S, "maxOffsetsPerTrigger": "5"})
    with pytest.raises(HutchOptionError, match="'maxOffsetsPerTrigger' is for streaming"):
        streamoptions.check_batch(settings)
    streamoptions.check_batch(streamoptions.parse_stream_options(S))
