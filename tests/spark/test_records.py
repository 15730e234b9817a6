"""Row conversion and the durable-batch log, with pyarrow but without a SparkSession."""

import datetime
import decimal
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.spark


class Props:
    """Stands in for pika.BasicProperties: only attribute access is used."""

    def __init__(self, **values: object) -> None:
        for name in (
            "message_id",
            "headers",
            "content_type",
            "correlation_id",
            "timestamp",
            "reply_to",
            "expiration",
            "priority",
            "type",
            "user_id",
            "app_id",
            "delivery_mode",
            "content_encoding",
            "cluster_id",
        ):
            setattr(self, name, values.get(name))


def delivery(tag: int, **props: object) -> Any:
    from hutch_spark import records

    return records.Delivery(
        epoch=1,
        tag=tag,
        redelivered=tag % 2 == 0,
        exchange="x",
        routing_key="rk",
        properties=Props(**props),
        body=b"body-%d" % tag,
        received_at_us=1_700_000_000_000_000,
    )


def test_header_values_become_text() -> None:
    from hutch_spark.records import header_text

    assert header_text(7) == "7"
    assert header_text(True) == "True"
    assert header_text(decimal.Decimal("1.50")) == "1.50"
    assert header_text(b"caf\xc3\xa9") == "café"
    assert header_text(b"\xff\x00") == "/wA="  # not UTF-8: base64
    assert header_text({"a": [1, b"\xff"]}) == '{"a":[1,"/w=="]}'
    assert (
        header_text(datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.UTC))
        == "2026-01-02T03:04:05+00:00"
    )
    assert header_text(None) is None


def test_record_batch_matches_sparks_arrow_schema() -> None:
    from hutch_spark import records

    batch = records.to_record_batch(
        [
            delivery(1, message_id="a", headers={"n": 1}, timestamp=1_700_000_000, priority=5),
            delivery(2),
        ],
        first_seq=11,
        queue="orders",
    )
    assert batch.schema.equals(records.arrow_schema())
    rows = batch.to_pylist()
    assert [row["seq"] for row in rows] == [11, 12]
    assert rows[0]["headers"] == [("n", "1")]
    assert rows[0]["properties"] == [("priority", "5")]
    assert rows[0]["timestamp"] == datetime.datetime(2023, 11, 14, 22, 13, 20, tzinfo=datetime.UTC)
    assert rows[1]["message_id"] is None
    assert rows[1]["headers"] is None
    assert rows[1]["redelivered"] is True
    assert rows[1]["body"] == b"body-2"
    assert [row["queue"] for row in rows] == ["orders", "orders"]


def test_batch_log_stages_reuses_and_deletes(tmp_path: Path) -> None:
    from hutch_spark import records
    from hutch_spark.batchlog import BatchLog

    log = BatchLog(tmp_path / "hutch-batches")
    assert log.find(0) is None
    first = records.to_record_batch([delivery(1), delivery(2)], first_seq=1, queue="q")
    second = records.to_record_batch([delivery(3)], first_seq=3, queue="q")
    log.write(0, 2, first)
    log.write(2, 3, second)
    found = log.find(2)
    assert found is not None
    assert found[0] == 3
    assert found[1].equals(second)
    assert log.read(0, 2).equals(first)  # type: ignore[union-attr]
    log.delete_through(2)
    assert log.read(0, 2) is None
    assert sorted(p.name for p in (tmp_path / "hutch-batches").iterdir()) == ["2-3.arrow"]
