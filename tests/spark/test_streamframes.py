"""The executor's frame parser (streamframes.SliceParser), fed frames as a broker sends them.

The frames are encoded by pika (an encoder independent of the parser), with `x-stream-offset`
last in the headers as a long, as RabbitMQ 3.10.8 and hutch-broker put it. However the bytes are
cut (whole, split in two at every position, across several chunks, one byte at a time) the rows
are the same, and the slice's cursor rules hold: offsets before the start skipped, the end
offset not read, a gap left by retention is data loss. Every test runs three ways: with the C
loop that takes runs of like deliveries (framescan), with its Python twin, and with no runs at
all (the parser's own path for every delivery), so the runs change no row.
"""

from __future__ import annotations

import datetime
import decimal
import logging
import struct
from typing import Any

import pika
import pytest
from hutch_spark import amqpframe, framescan, streamframes, streamrecords, streamwire
from hutch_spark.errors import HutchDataLossError
from hutch_spark.streamframes import FrameError, SliceParser
from hutch_spark.streamplan import Slice
from hutch_spark.streamreads import SliceCursor
from pika import frame, spec
from pyspark.sql.pandas.types import to_arrow_schema

from tests.spark.deliveries import delivery


def no_runs(buf: bytes, pos: int, *_: Any) -> tuple[int, list[bytes], int]:
    return pos, [], 0


@pytest.fixture(autouse=True, params=["c", "python", "no runs"])
def runs(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The parser's run loop for this test: the C one (failing where it is not built), its
    Python twin, or none."""
    if request.param == "c":
        from hutch_spark import _framescan  # type: ignore[attr-defined]

        chosen = _framescan.scan
    else:
        chosen = framescan.scan_python if request.param == "python" else no_runs
    monkeypatch.setattr(streamframes, "scan", chosen)
    return str(request.param)


def parser(start: int, end: int, *, fail_on_data_loss: bool = True) -> SliceParser:
    cursor = SliceCursor(Slice("s", start, end), fail_on_data_loss=fail_on_data_loss)
    return SliceParser("s", cursor)


def rows(p: SliceParser) -> list[dict[str, Any]]:
    found = p.take().to_pylist()
    for row in found:
        for key in ("headers", "properties"):
            if row[key] is not None:
                row[key] = dict(row[key])
    return found


def feed_in(p: SliceParser, raw: bytes, cuts: list[int]) -> None:
    low = 0
    for cut in [*cuts, len(raw)]:
        p.feed(raw[low:cut], 7)
        low = cut


RICH = {
    "message_id": "m-1",
    "correlation_id": "c-1",
    "content_type": "application/json",
    "timestamp": 1_700_000_000,
    "delivery_mode": 2,
    "priority": 3,
    "reply_to": "replies",
    "app_id": "bench",
    "headers": {"tenant": "acme", "n": 42, "raw": b"\xff\xfe", "nested": {"a": [1, "b"]}},
}


def test_a_rich_delivery_becomes_the_row_the_classic_rules_give() -> None:
    p = parser(3, 10)
    p.feed(delivery(3, b'{"a":1}', exchange="x", routing_key="k", **RICH), 1_000)
    [row] = rows(p)
    assert row["stream"] == "s" and row["offset"] == 3
    assert row["message_id"] == "m-1" and row["correlation_id"] == "c-1"
    assert row["exchange"] == "x" and row["routing_key"] == "k"
    assert row["content_type"] == "application/json"
    assert row["timestamp"].timestamp() == 1_700_000_000
    assert row["received_at"].timestamp() == 0.001
    assert row["body"] == b'{"a":1}'
    assert row["headers"] == {
        "tenant": "acme",
        "n": "42",
        "raw": "//4=",  # not UTF-8: base64, as records.header_text says
        "nested": '{"a":[1,"b"]}',
        "x-stream-offset": "3",
    }
    assert row["properties"] == {
        "delivery_mode": "2",
        "priority": "3",
        "reply_to": "replies",
        "app_id": "bench",
    }


def stream_of(count: int, first: int = 0, **kwargs: Any) -> bytes:
    parts = []
    for offset in range(first, first + count):
        body = f"body-{offset}".encode() * (offset % 5)  # empty bodies too
        parts.append(delivery(offset, body, message_id=f"id-{offset % 3}", **kwargs))
    return b"".join(parts)


def expected(first: int, end: int) -> list[tuple[int, bytes, str, dict[str, Any]]]:
    return [
        (
            offset,
            f"body-{offset}".encode() * (offset % 5),
            f"id-{offset % 3}",
            {"x-stream-offset": str(offset)},
        )
        for offset in range(first, end)
    ]


def brief(found: list[dict[str, Any]]) -> list[tuple[int, bytes, str, dict[str, Any]]]:
    return [(r["offset"], r["body"], r["message_id"], r["headers"]) for r in found]


def test_every_split_of_the_bytes_gives_the_same_rows() -> None:
    raw = stream_of(12)
    whole = parser(0, 12)
    whole.feed(raw, 7)
    reference = rows(whole)
    assert brief(reference) == expected(0, 12)
    for cut in range(1, len(raw)):
        p = parser(0, 12)
        p.feed(raw[:cut], 7)
        # the tag and count of complete deliveries only: acks are computed from them
        assert p.last_tag == p.deliveries, cut
        p.feed(raw[cut:], 7)
        assert rows(p) == reference, cut
    p = parser(0, 12)
    feed_in(p, raw, list(range(1, len(raw))))  # one byte at a time
    assert rows(p) == reference
    assert p.pending == 0 and p.deliveries == 12 and p.last_tag == 12


def test_a_stream_of_like_deliveries_goes_by_runs_after_its_first(
    runs: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The point of the runs: after the first delivery of a template, its like are taken by
    the run loop, not one by one; a gap, a new template or the end stop a run, and the parser
    takes the one that stopped it."""
    taken: list[int] = []
    loop = streamframes.scan

    def counted(*args: Any) -> tuple[int, list[bytes], int]:
        found = loop(*args)
        taken.append(len(found[1]))
        return found

    monkeypatch.setattr(streamframes, "scan", counted)
    raw = b"".join(delivery(n, b"b%d" % n, message_id="same") for n in range(100))
    raw += delivery(100, b"other", message_id="another")  # a new template
    raw += b"".join(delivery(n, b"b%d" % n, message_id="same") for n in range(101, 150))
    raw += b"".join(delivery(n, b"b%d" % n, message_id="same") for n in range(152, 200))  # gap
    p = parser(0, 190, fail_on_data_loss=False)
    p.feed(raw, 7)
    found = rows(p)
    assert [r["offset"] for r in found] == [*range(150), *range(152, 190)]
    assert [r["body"] for r in found] == [b"other" if n == 100 else b"b%d" % n
                                          for n in [*range(150), *range(152, 190)]]  # fmt: skip
    # every delivery counts for credit, also those from the end offset on (not rows)
    assert p.deliveries == 198 and p.last_tag == 200
    if runs == "no runs":
        assert sum(taken) == 0
    else:
        # the parser's own path took offsets 0, 100, 101 (after a new template), 152 (a gap)
        # and 190 on (the end offset): every other row came in a run
        assert sum(taken) == 188 - 4


def test_bodies_over_several_frames_and_chunk_boundaries() -> None:
    body = bytes(range(256)) * 40  # 10,240 bytes: three body frames at frame_max 4096
    raw = delivery(0, body, frame_max=4096) + delivery(1, body[:4088], frame_max=4096)
    for cuts in ([4096], [20, 4200, 8000, 10300], [len(raw) - 1]):
        p = parser(0, 2)
        feed_in(p, raw, cuts)
        assert [r["body"] for r in rows(p)] == [body, body[:4088]], cuts


def test_a_small_int_offset_takes_the_slow_path_to_the_same_rows() -> None:
    raw = b"".join(delivery(n, b"x", offset_type="I", message_id="same") for n in range(5))
    p = parser(0, 5)
    p.feed(raw, 7)
    assert [(r["offset"], r["headers"]) for r in rows(p)] == [
        (n, {"x-stream-offset": str(n)}) for n in range(5)
    ]


def test_the_offsets_bytes_inside_a_property_or_a_header_value_are_not_the_offset() -> None:
    # The header's name, its type and 8 bytes, as a publisher may put them in any string: in
    # the message_id (after the headers) and inside a nested table; only the top-level
    # x-stream-offset is the offset.
    fake = "\x0fx-stream-offsetl" + "AAAAAAAA"
    headers = {
        "text": fake,
        "nested": {"x-stream-offset": 5, "list": [1, "x", {"deep": fake}]},
        "raw": fake.encode(),
        "flag": True,
        "ratio": decimal.Decimal("1.5"),
        "when": datetime.datetime(2026, 11, 28, 12, 0, 0, tzinfo=datetime.UTC),
        "nothing": None,
    }
    raw = b"".join(delivery(n, b"b", message_id=fake, headers=headers) for n in range(3))
    for cuts in ([], [len(raw) // 2]):
        p = parser(0, 3)
        feed_in(p, raw, cuts)
        found = rows(p)
        assert [r["offset"] for r in found] == [0, 1, 2]
        assert {r["message_id"] for r in found} == {fake}
        assert [r["headers"]["x-stream-offset"] for r in found] == ["0", "1", "2"]


def test_offsets_read_where_the_last_one_was_are_the_walks_over_mixed_templates() -> None:
    """The parser reads a delivery's offset where the previous delivery's was when the bytes
    around it are a known template's, and walks the headers otherwise. Deliveries whose
    offsets sit at different places (headers of other lengths before it, properties after it,
    lookalike bytes in values, a short-int offset on the slow path, other routes, empty and
    two-frame bodies) in a random order give the rows each delivery alone gives."""
    import random

    fake = "\x0fx-stream-offsetl" + "AAAAAAAA"
    shapes: list[dict[str, Any]] = [
        {},
        {"headers": {"a": "x"}},
        {"headers": {"a": "xxxxxxxx"}},  # the same names, the offset 7 bytes further
        {"headers": {"a": "x", "b": fake}, "message_id": fake},
        {"headers": {"nested": {"x-stream-offset": 9}}},
        {"message_id": "m", "app_id": "later"},
        {"offset_type": "I"},
        {"routing_key": "other"},
        {"exchange": "ex", "headers": {"a": "x"}},
    ]
    rng = random.Random(28)
    raws, alone = [], []
    for offset in range(300):
        shape = dict(rng.choice(shapes))
        body = rng.choice([b"", b"b", b"z" * 5000])
        raw = delivery(offset, body, **shape)
        raws.append(raw)
        single = parser(offset, offset + 1)
        single.feed(raw, 7)
        alone += rows(single)
    raw = b"".join(raws)
    for cuts in ([], [len(raw) // 3, 2 * len(raw) // 3], list(range(1, len(raw), 977))):
        p = parser(0, 300)
        feed_in(p, raw, cuts)
        assert rows(p) == alone


def test_a_template_matched_with_its_offset_elsewhere_is_walked_not_read_there() -> None:
    """The one case where cutting the 8 bytes at the last offset's place gives a known
    template's bytes though the offset is not there: T (offset 0, timestamp 2) teaches a
    template; D (two 4-byte headers before its offset) moves the guess 8 bytes on; M (offset 2,
    timestamp 12,345) cut there is T's bytes cut at T's offset. M's offset is where T's was;
    read at the guess it would be M's timestamp."""
    raw = (
        delivery(0, b"t", timestamp=2)
        + delivery(1, b"d", headers={"a": True, "b": True})
        + delivery(2, b"m", timestamp=12_345)
    )
    p = parser(0, 3)
    p.feed(raw, 7)
    found = rows(p)
    assert [r["offset"] for r in found] == [0, 1, 2]
    assert [r["timestamp"] and r["timestamp"].timestamp() for r in found] == [2, None, 12_345]


def test_the_end_offset_is_not_read_and_offsets_before_the_start_are_skipped() -> None:
    # A broker may start at the beginning of the chunk holding the start (RabbitMQ does).
    p = parser(5, 9)
    p.feed(stream_of(12, first=2), 7)
    assert brief(rows(p)) == expected(5, 9)
    assert p.cursor.done and p.cursor.expected == 9
    assert p.deliveries == 12  # all counted for credit, only the slice's are rows


def test_the_message_at_the_end_offset_completes_nothing_and_is_not_a_row() -> None:
    p = parser(0, 3)
    p.feed(stream_of(2), 7)
    assert not p.cursor.done
    p.feed(delivery(2, b"last") + delivery(3, b"past"), 7)
    assert [(r["offset"], r["body"]) for r in rows(p)] == [(0, b""), (1, b"body-1"), (2, b"last")]
    assert p.cursor.done and p.deliveries == 4


def test_a_gap_from_retention_is_data_loss_or_skipped_with_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    raw = stream_of(3) + stream_of(4, first=6)  # offsets 3, 4, 5 removed under the reader
    with pytest.raises(HutchDataLossError, match=r"no longer holds offsets \[3, 6\)"):
        parser(0, 10).feed(raw, 7)
    p = parser(0, 10, fail_on_data_loss=False)
    with caplog.at_level(logging.WARNING, logger="hutch_spark.streamreads"):
        p.feed(raw, 7)
    assert "failOnDataLoss=false, so they are skipped" in caplog.text
    assert brief(rows(p)) == expected(0, 3) + expected(6, 10)
    assert p.cursor.lost == [(3, 6)] and p.cursor.done


def test_the_end_offset_after_a_gap_ends_the_slice_with_the_gap_lost() -> None:
    p = parser(0, 3, fail_on_data_loss=False)
    p.feed(stream_of(2) + delivery(3, b"past"), 7)
    assert brief(rows(p)) == expected(0, 2)
    assert p.cursor.lost == [(2, 3)] and p.cursor.done


def test_heartbeats_and_other_methods_between_deliveries() -> None:
    heartbeat = streamwire.frame(amqpframe.HEARTBEAT, 0, b"")
    blocked = frame.Method(0, spec.Connection.Blocked("low on memory")).marshal()
    raw = delivery(0) + heartbeat + blocked + delivery(1)
    p = parser(0, 2)
    feed_in(p, raw, [3, len(raw) - 2])
    assert [r["offset"] for r in rows(p)] == [0, 1]
    assert [(m.class_id, m.method_id) for m in p.methods] == [(10, 60)]


def test_templates_are_shared_by_repeated_properties_and_kept_apart_otherwise() -> None:
    raw = b"".join(
        delivery(n, b"b", routing_key=f"k{n % 2}", message_id="same") for n in range(6)
    ) + delivery(6, b"b", routing_key="k0", message_id="other")
    p = parser(0, 8)
    p.feed(raw, 7)
    assert len(p._templates) == 3  # (k0, same), (k1, same), (k0, other)
    found = rows(p)
    assert [(r["routing_key"], r["message_id"]) for r in found] == [
        ("k0", "same"),
        ("k1", "same"),
        ("k0", "same"),
        ("k1", "same"),
        ("k0", "same"),
        ("k1", "same"),
        ("k0", "other"),
    ]
    p.feed(delivery(7, b"b"), 7)  # after take(), templates start afresh
    assert [r["offset"] for r in rows(p)] == [7]


def test_bad_frames_are_errors_not_rows() -> None:
    good = delivery(0)
    method_end = 7 + struct.unpack_from(">I", good, 3)[0]
    broken_end = good[:method_end] + b"\x00" + good[method_end + 1 :]
    with pytest.raises(FrameError, match="does not end with 0xCE"):
        parser(0, 1).feed(broken_end, 7)
    with pytest.raises(FrameError, match="a body frame of the delivery at byte 0 is missing"):
        parser(0, 1).feed(good[:-1] + b"\x00", 7)
    no_header = frame.Method(1, spec.Basic.Deliver("c", 1, False, "", "s")).marshal()
    with pytest.raises(FrameError, match="not followed by its header"):
        parser(0, 1).feed(no_header + frame.Body(1, b"x").marshal(), 7)
    plain = (
        frame.Method(1, spec.Basic.Deliver("c", 1, False, "", "s")).marshal()
        + frame.Header(1, 1, pika.BasicProperties(message_id="m")).marshal()
        + frame.Body(1, b"x").marshal()
    )
    with pytest.raises(FrameError, match="has no x-stream-offset header"):
        parser(0, 1).feed(plain, 7)
    declared_one = delivery(0, b"x")
    longer = declared_one[: -len(frame.Body(1, b"x").marshal())] + frame.Body(1, b"xy").marshal()
    with pytest.raises(FrameError, match="has more body than it declared"):
        parser(0, 1).feed(longer, 7)


def test_an_empty_take_has_the_schema() -> None:
    batch = parser(0, 1).take()
    assert batch.num_rows == 0
    assert batch.schema == streamrecords.arrow_schema()


def test_the_stream_schema_is_what_pyspark_derives_from_the_spark_schema() -> None:
    assert streamrecords.arrow_schema() == to_arrow_schema(streamrecords.SCHEMA, timezone="UTC")
