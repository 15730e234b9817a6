"""Every option rule of the `hutch` source and sink (docs/contracts/spark.md#options, #sink), without Spark.

The parser is pure, so each rule is one table row: options in, either the parsed field or the
error text out. Spark lower-cases option keys, so some rows use lower-case keys on purpose.
"""

from typing import Any

import pytest
from hutch_spark import options
from hutch_spark.errors import HutchOptionError

Q = {"queue": "events"}

SOURCE_OK: list[tuple[dict[str, str], str, Any]] = [
    (Q, "queue", "events"),
    ({"queue": "q" * 255}, "queue", "q" * 255),
    (Q, "uri", options.DEFAULT_URI),
    ({**Q, "uri": "amqps://h:5671/vh"}, "uri", "amqps://h:5671/vh"),
    (Q, "max_messages_per_batch", 1000),
    ({**Q, "maxmessagesperbatch": "65535"}, "max_messages_per_batch", 65535),
    (Q, "prefetch", 2000),
    ({**Q, "maxMessagesPerBatch": "40000"}, "prefetch", 65535),
    ({**Q, "maxMessagesPerBatch": "100", "prefetch": "100"}, "prefetch", 100),
    (Q, "max_bytes_per_batch", 16 * 1024 * 1024),
    ({**Q, "maxBytesPerBatch": str(64 * 1024 * 1024)}, "max_bytes_per_batch", 64 * 1024 * 1024),
    (Q, "num_partitions", 1),
    ({**Q, "numPartitions": "256"}, "num_partitions", 256),
    (Q, "poll_timeout_ms", 200),
    ({**Q, "pollTimeoutMs": "0"}, "poll_timeout_ms", 0),
    (Q, "exclusive", False),
    ({**Q, "exclusive": "TRUE"}, "exclusive", True),
    (Q, "consumer_timeout_ms", None),
    ({**Q, "consumerTimeoutMs": "60000"}, "consumer_timeout_ms", 60000),
    (Q, "durable_batches", False),
    ({**Q, "durableBatches": "true", "batchLogDir": "/ckpt/hutch"}, "batch_log_dir", "/ckpt/hutch"),
    (Q, "max_messages", 1000),
    (Q, "batch_mode", "peek"),
    ({**Q, "batchMode": "drain"}, "batch_mode", "drain"),
    ({**Q, "path": "ignored", "checkpointLocation": "/x", "queryName": "q"}, "queue", "events"),
    (Q, "queues", ("events",)),
    (Q, "per_queue_offsets", False),
    ({"queue": "a,b"}, "queues", ("a,b",)),  # `queue` is one name, commas and all
    ({"queues": "a, b ,c"}, "queues", ("a", "b", "c")),
    ({"queues": "a,b"}, "queue", "a"),
    ({"queues": "a,b"}, "per_queue_offsets", True),
    ({"queues": "solo"}, "per_queue_offsets", True),
    ({"QUEUES": ",".join(f"q{n}" for n in range(64))}, "queues", tuple(f"q{n}" for n in range(64))),
]

SOURCE_BAD: list[tuple[dict[str, str], str]] = [
    ({}, "'queue' is required"),
    ({"queue": ""}, "'queue' = '' must be 1 to 255 bytes"),
    ({"queue": "é" * 128}, "must be 1 to 255 bytes"),
    ({"queue": "a", "queues": "b,c"}, "either option 'queue' or option 'queues', not both"),
    ({"queues": "a,,b"}, "'queues' = '' must be 1 to 255 bytes"),
    ({"queues": "a,b,a"}, "names a queue twice"),
    ({"queues": ",".join(f"q{n}" for n in range(65))}, "names 65 queues (allowed: 1 to 64)"),
    ({**Q, "uri": "http://h/"}, "must start with amqp:// or amqps://"),
    ({**Q, "uri": "amqp:///vhost"}, "has no host"),
    ({**Q, "uri": "amqp://h:notaport/"}, "invalid port"),
    ({**Q, "uri": "amqp://u:secret@h:0/"}, "'amqp://u:***@h:0/' has an invalid port"),
    (
        {**Q, "maxMessagesPerBatch": "0"},
        "'maxMessagesPerBatch' = 0 is out of range (allowed: 1 to 65535)",
    ),
    ({**Q, "maxMessagesPerBatch": "65536"}, "out of range"),
    ({**Q, "maxMessagesPerBatch": "ten"}, "'maxMessagesPerBatch' = 'ten' is not an integer"),
    ({**Q, "prefetch": "0"}, "'prefetch' = 0 is out of range (allowed: 1 to 65535)"),
    ({**Q, "prefetch": "70000"}, "out of range"),
    ({**Q, "maxMessagesPerBatch": "100", "prefetch": "99"}, "must be >= maxMessagesPerBatch (100)"),
    ({**Q, "maxBytesPerBatch": "0"}, "'maxBytesPerBatch' = 0 is out of range"),
    ({**Q, "maxBytesPerBatch": str(64 * 1024 * 1024 + 1)}, "out of range (allowed: 1 to 67108864)"),
    ({**Q, "numPartitions": "0"}, "'numPartitions' = 0 is out of range (allowed: 1 to 256)"),
    ({**Q, "numPartitions": "257"}, "out of range"),
    ({**Q, "pollTimeoutMs": "-1"}, "'pollTimeoutMs' = -1 is out of range (allowed: 0 to 10000)"),
    ({**Q, "pollTimeoutMs": "10001"}, "out of range"),
    ({**Q, "exclusive": "yes"}, "'exclusive' = 'yes' must be true or false"),
    ({**Q, "consumerTimeoutMs": "0"}, "'consumerTimeoutMs' = 0 is out of range"),
    ({**Q, "durableBatches": "true"}, "'batchLogDir' is required when durableBatches=true"),
    ({**Q, "durableBatches": "1"}, "'durableBatches' = '1' must be true or false"),
    ({**Q, "durableBatches": "true", "batchLogDir": "s3a://b/p"}, "must be a local POSIX path"),
    ({**Q, "maxMessages": "0"}, "'maxMessages' = 0 is out of range"),
    ({**Q, "batchMode": "consume"}, "'batchMode' = 'consume' must be one of peek, drain"),
    (
        {**Q, "maxmessageperbatch": "10"},
        "'maxmessageperbatch'; did you mean 'maxMessagesPerBatch'?",
    ),
]


@pytest.mark.parametrize(("given", "field", "expected"), SOURCE_OK)
def test_source_option_accepted(given: dict[str, str], field: str, expected: Any) -> None:
    assert getattr(options.parse_source_options(given), field) == expected


@pytest.mark.parametrize(("given", "message"), SOURCE_BAD)
def test_source_option_rejected(given: dict[str, str], message: str) -> None:
    with pytest.raises(HutchOptionError, match=r"^hutch: ") as caught:
        options.parse_source_options(given)
    assert message in str(caught.value)


def test_uri_defaults_to_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HUTCH_AMQP_URI", "amqp://broker.ns.svc.cluster.local:5672/%2F")
    assert options.parse_source_options(Q).uri == "amqp://broker.ns.svc.cluster.local:5672/%2F"


def test_option_errors_are_value_errors() -> None:
    with pytest.raises(ValueError, match="queue"):
        options.parse_source_options({})


X = {"exchange": "out"}

SINK_OK: list[tuple[dict[str, str], str, Any]] = [
    (X, "exchange", "out"),
    ({"exchange": ""}, "exchange", ""),
    (X, "routing_key", ""),
    ({**X, "routingkey": "rk"}, "routing_key", "rk"),
    (X, "mandatory", True),
    ({**X, "mandatory": "false"}, "mandatory", False),
    (X, "persistent", True),
    (X, "confirm_window", 256),
    ({**X, "confirmWindow": "10000"}, "confirm_window", 10000),
    (X, "id_prefix", None),
    ({**X, "idPrefix": "daily-2026-11-22"}, "id_prefix", "daily-2026-11-22"),
]

SINK_BAD: list[tuple[dict[str, str], str]] = [
    ({}, "'exchange' is required; pass exchange='' explicitly"),
    ({**X, "confirmWindow": "0"}, "'confirmWindow' = 0 is out of range (allowed: 1 to 10000)"),
    ({**X, "confirmWindow": "10001"}, "out of range"),
    ({**X, "persistent": "maybe"}, "'persistent' = 'maybe' must be true or false"),
    ({**X, "idPrefix": ""}, "'idPrefix' = '' must be 1 to 128 characters"),
    ({**X, "routingKey": "k" * 256}, "'routingKey' exceeds 255 bytes"),
    ({**X, "uri": "amqp//nohost"}, "must start with amqp://"),
    ({**X, "queue": "q"}, "unknown option 'queue'"),
]


@pytest.mark.parametrize(("given", "field", "expected"), SINK_OK)
def test_sink_option_accepted(given: dict[str, str], field: str, expected: Any) -> None:
    assert getattr(options.parse_sink_options(given), field) == expected


@pytest.mark.parametrize(("given", "message"), SINK_BAD)
def test_sink_option_rejected(given: dict[str, str], message: str) -> None:
    with pytest.raises(HutchOptionError, match=r"^hutch: ") as caught:
        options.parse_sink_options(given)
    assert message in str(caught.value)


def test_sink_refuses_overwrite() -> None:
    with pytest.raises(HutchOptionError, match="append only"):
        options.parse_sink_options(X, overwrite=True)


def test_redact_uri_hides_only_the_password() -> None:
    assert options.redact_uri("amqp://user:pw@h:5672/%2F") == "amqp://user:***@h:5672/%2F"
    assert options.redact_uri("amqp://h/") == "amqp://h/"
