"""The stream source's planning, in memory: offsets, limits, data loss, slices, the executor's
per-offset decisions and the management API's answers (streamplan.py, streamreads.SliceCursor,
streambounds.bounds_of). The same rules run against a real broker in test_streamsource.py."""

import logging

import pytest
from hutch_spark import streambounds, streamhttp, streamoptions, streamplan
from hutch_spark.errors import HutchConnectionError, HutchDataLossError, HutchOffsetError
from hutch_spark.streamplan import Bounds, Slice
from hutch_spark.streamreads import Credit, SliceCursor
from hutch_spark.streamsource import plan_batch

HELD = {"a": Bounds(first=10, next=50), "b": Bounds(first=0, next=7)}


def test_resolve_words_and_markers() -> None:
    assert streamplan.resolve("earliest", HELD) == {"a": 10, "b": 0}
    assert streamplan.resolve("latest", HELD) == {"a": 50, "b": 7}
    assert streamplan.resolve({"a": -2, "b": -1}, HELD) == {"a": 10, "b": 7}
    assert streamplan.resolve({"a": 12, "b": 3}, HELD) == {"a": 12, "b": 3}


def test_a_checkpoint_of_other_streams_is_an_error() -> None:
    assert streamplan.parse_offset({"a": 3, "b": 0}, ("a", "b")) == {"a": 3, "b": 0}
    with pytest.raises(HutchOffsetError, match=r"streams \['a'\], but this source reads"):
        streamplan.parse_offset({"a": 3}, ("a", "b"))
    with pytest.raises(HutchOffsetError, match="must have an offset >= 0, or batch 0's"):
        streamplan.parse_offset({"a": -1, "b": 0}, ("a", "b"))
    with pytest.raises(HutchOffsetError, match="must have an offset >= 0"):
        streamplan.parse_offset({"a": True, "b": 0}, ("a", "b"))


def test_a_new_query_leaves_latest_and_earliest_unresolved() -> None:
    streams = ("a", "b")
    assert streamplan.initial("latest", streams) == {"a": -1, "b": -1}
    assert streamplan.initial("earliest", streams) == {"a": -2, "b": -2}
    assert streamplan.initial({"a": 12, "b": -1}, streams) == {"a": 12, "b": -1}
    assert streamplan.initial({"a": -2, "b": 3}, streams) == {"a": -2, "b": 3}
    held = Bounds(first=10, next=50)
    assert streamplan.resolve_start(-2, held) == 10
    assert streamplan.resolve_start(-1, held) == 50


def test_an_unresolved_start_is_what_batch_0s_logged_end_carries() -> None:
    # Batch 0 logs [end, start] for a stream it resolved and reads; a bare end reads nothing.
    assert streamplan.logged_end(10, 60) == [60, 10]
    assert streamplan.logged_end(60, 60) == 60
    assert streamplan.batch_starts({"a": -2, "b": 3}, {"a": 60, "b": 9}, {"a": 10}) == {
        "a": 10,
        "b": 3,
    }
    assert streamplan.batch_starts({"a": -1, "b": 3}, {"a": 70, "b": 9}, {}) == {"a": 70, "b": 3}
    assert streamplan.batch_starts({"a": -2, "b": -1}, {"a": 70, "b": 9}, {}) == {"a": 70, "b": 9}
    assert streamplan.batch_starts({"a": 5, "b": 3}, {"a": 70, "b": 9}, {}) == {"a": 5, "b": 3}


def test_batch_0s_end_is_its_end_to_the_next_batch_and_its_start_to_its_replay() -> None:
    end0 = {"a": [60, 10], "b": 9}
    assert streamplan.parse_offset(end0, ("a", "b")) == {"a": 60, "b": 9}
    assert streamplan.parse_offset(end0, ("a", "b"), start=True) == {"a": 60, "b": 9}
    assert streamplan.parse_end(end0, ("a", "b")) == ({"a": 60, "b": 9}, {"a": 10})
    assert streamplan.parse_end({"a": 60, "b": 9}, ("a", "b")) == ({"a": 60, "b": 9}, {})
    for bad in ([10, 10], [10, 60], [60], [60, 10, 1], [60, -1], [60, True], [60.0, 10]):
        with pytest.raises(HutchOffsetError, match="stream 'a'"):
            streamplan.parse_offset({"a": bad, "b": 9}, ("a", "b"))


def test_a_start_may_be_unresolved_a_logged_end_may_not() -> None:
    for start in ({"a": -1, "b": 0}, {"a": -2, "b": 0}):
        assert streamplan.parse_offset(start, ("a", "b"), start=True) == start
        with pytest.raises(HutchOffsetError, match=r"must have an offset >= 0, or batch 0's"):
            streamplan.parse_offset(start, ("a", "b"))
    for bad in (-3, True, "7", None, 1.5):
        with pytest.raises(HutchOffsetError, match=r"or -1 or -2 \(not resolved yet\), or batch"):
            streamplan.parse_offset({"a": bad, "b": 0}, ("a", "b"), start=True)


def test_readable_start_within_the_bounds() -> None:
    for start in (10, 30, 50):
        assert streamplan.readable_start("a", start, HELD["a"], fail_on_data_loss=True) == start


def test_retention_below_the_checkpoint_fails_naming_the_stream_and_range() -> None:
    with pytest.raises(HutchDataLossError) as caught:
        streamplan.readable_start("a", 4, HELD["a"], fail_on_data_loss=True)
    text = str(caught.value)
    assert "retention removed offsets [4, 10) of stream 'a'" in text
    assert "failOnDataLoss=false" in text
    assert streamplan.readable_start("a", 4, HELD["a"], fail_on_data_loss=False) == 10


def test_a_stream_shorter_than_the_checkpoint_is_data_loss_too() -> None:
    with pytest.raises(
        HutchDataLossError, match="stream 'b' ends at offset 7, before the offset 9"
    ):
        streamplan.readable_start("b", 9, HELD["b"], fail_on_data_loss=True)
    assert streamplan.readable_start("b", 9, HELD["b"], fail_on_data_loss=False) == 0


def test_limit_ends_takes_everything_without_a_limit() -> None:
    assert streamplan.limit_ends({"a": 10, "b": 7}, {"a": 50, "b": 7}, None) == {"a": 50, "b": 7}
    assert streamplan.limit_ends({"a": 10, "b": 7}, {"a": 50, "b": 7}, 100) == {"a": 50, "b": 7}


def test_limit_ends_shares_the_limit_by_what_waits() -> None:
    # 30 and 10 waiting, 8 allowed: 6 and 2.
    assert streamplan.limit_ends({"a": 0, "b": 0}, {"a": 30, "b": 10}, 8) == {"a": 6, "b": 2}
    # The rounding rest goes to the stream with most waiting, so the total is exact.
    ends = streamplan.limit_ends({"a": 0, "b": 0, "c": 0}, {"a": 1, "b": 1, "c": 1}, 2)
    assert sum(ends.values()) == 2
    assert ends == {"a": 1, "b": 1, "c": 0}
    # A limit of 1 over many streams still makes progress.
    ends = streamplan.limit_ends({"a": 5, "b": 5}, {"a": 6, "b": 1000}, 1)
    assert ends == {"a": 5, "b": 6}


def test_limit_ends_never_moves_a_stream_back() -> None:
    assert streamplan.limit_ends({"a": 9}, {"a": 7}, 5) == {"a": 9}


@pytest.mark.parametrize(
    ("start", "end", "parts", "expected"),
    [
        (0, 10, 1, [(0, 10)]),
        (0, 10, 3, [(0, 4), (4, 7), (7, 10)]),
        (5, 7, 4, [(5, 6), (6, 7)]),
        (5, 5, 4, []),
        (100, 1100, 2, [(100, 600), (600, 1100)]),
    ],
)
def test_slices_are_contiguous_and_never_empty(
    start: int, end: int, parts: int, expected: list[tuple[int, int]]
) -> None:
    assert streamplan.slices("s", start, end, parts) == [Slice("s", lo, hi) for lo, hi in expected]


def test_plan_slices_stream_by_stream_and_a_declared_again_stream_from_zero() -> None:
    planned = streamplan.plan_slices({"a": 10, "b": 9}, {"a": 14, "b": 3}, 2)
    assert planned == [Slice("a", 10, 12), Slice("a", 12, 14), Slice("b", 0, 2), Slice("b", 2, 3)]


def test_batch_plan_checks_the_range_against_the_stream() -> None:
    settings = streamoptions.parse_stream_options({"streams": "a,b", "numPartitions": "2"})
    planned = plan_batch(settings, HELD, {"a": 10, "b": 0}, {"a": 20, "b": 7})
    assert planned == [Slice("a", 10, 15), Slice("a", 15, 20), Slice("b", 0, 4), Slice("b", 4, 7)]
    with pytest.raises(ValueError, match="offset 60, past its end 50"):
        plan_batch(settings, HELD, {"a": 10, "b": 0}, {"a": 60, "b": 7})
    with pytest.raises(ValueError, match="the starting offset 30 is after the ending offset 20"):
        plan_batch(settings, HELD, {"a": 30, "b": 0}, {"a": 20, "b": 7})
    with pytest.raises(HutchDataLossError, match=r"\[2, 10\) of stream 'a'"):
        plan_batch(settings, HELD, {"a": 2, "b": 0}, {"a": 20, "b": 7})
    lenient = streamoptions.parse_stream_options({"streams": "a,b", "failOnDataLoss": "false"})
    assert plan_batch(lenient, HELD, {"a": 2, "b": 0}, {"a": 20, "b": 0}) == [Slice("a", 10, 20)]


def test_cursor_skips_offsets_before_the_slice_and_stops_at_its_end() -> None:
    cursor = SliceCursor(Slice("s", 5, 8), fail_on_data_loss=True)
    kept = [offset for offset in range(8) if cursor.accept(offset)]
    assert kept == [5, 6, 7]
    assert cursor.done
    assert not cursor.accept(8)


def test_cursor_on_an_empty_slice_is_done_at_once() -> None:
    assert SliceCursor(Slice("s", 5, 5), fail_on_data_loss=True).done


def test_cursor_gap_is_data_loss() -> None:
    cursor = SliceCursor(Slice("s", 5, 10), fail_on_data_loss=True)
    assert cursor.accept(5)
    with pytest.raises(HutchDataLossError, match=r"no longer holds offsets \[6, 8\) of the slice"):
        cursor.accept(8)


def test_cursor_skips_a_gap_with_a_warning_when_allowed(caplog: pytest.LogCaptureFixture) -> None:
    cursor = SliceCursor(Slice("s", 5, 10), fail_on_data_loss=False)
    with caplog.at_level(logging.WARNING):
        assert cursor.accept(8)
    assert cursor.lost == [(5, 8)]
    assert "failOnDataLoss=false" in caplog.text
    # A slice wholly removed ends at the first offset past it, reading nothing.
    gone = SliceCursor(Slice("s", 0, 4), fail_on_data_loss=False)
    assert not gone.accept(9)
    assert gone.done
    assert gone.lost == [(0, 4)]


def test_bounds_of_a_hutch_stream_item() -> None:
    item = {"type": "stream", "first_offset": 3, "last_offset": 9, "next_offset": 10}
    assert streambounds.bounds_of(item, "s", "/", "http://h:1") == Bounds(3, 10)


def test_bounds_of_a_classic_queue_or_a_broker_without_offsets() -> None:
    with pytest.raises(HutchConnectionError, match="is a classic queue, not a stream"):
        streambounds.bounds_of({"type": "classic"}, "q", "/", "http://h:1")
    with pytest.raises(HutchConnectionError, match="needs hutch-broker"):
        streambounds.bounds_of({"type": "stream", "messages": 4}, "s", "/", "http://h:1")


def test_management_credentials_never_come_from_options_alone() -> None:
    plain = streamoptions.parse_stream_options({"streams": "s"})
    assert streamhttp.credentials(plain, env={}) == ("guest", "guest")
    env = {"HUTCH_AMQP_USERNAME": "job", "HUTCH_AMQP_PASSWORD": "pw"}
    assert streamhttp.credentials(plain, env=env) == ("job", "pw")
    in_uri = streamoptions.parse_stream_options({"streams": "s", "uri": "amqp://u:p%40@h/"})
    assert streamhttp.credentials(in_uri, env=env) == ("u", "p@")


def broker_allowance(credit: Credit, first: int, end: int) -> int:
    """Simulates a broker sending from `first` while the reader has credit, and the reader
    acking as streamreads does until it has seen `end - 1`; returns how many deliveries the
    broker may send in all by then (the acked ones plus the prefetch)."""
    sent = acked = 0
    offset = first
    while True:
        assert sent < acked + credit.prefetch, f"stalled at offset {offset}"
        sent += 1
        done = offset >= end - 1
        if credit.delivered(offset, end) and not done:
            acked = sent
        if done:
            return acked + credit.prefetch
        offset += 1


@pytest.mark.parametrize(
    ("prefetch", "start", "end"), [(1000, 0, 50), (10, 0, 50), (7, 100, 123), (1, 5, 9), (4, 0, 4)]
)
def test_credit_lets_the_broker_send_the_slice_and_nothing_past_it(
    prefetch: int, start: int, end: int
) -> None:
    credit = Credit(prefetch, end - start)
    assert credit.prefetch == min(prefetch, end - start)
    assert broker_allowance(credit, start, end) == end - start


def test_credit_counts_from_the_first_delivery() -> None:
    # A broker starting 3 before the slice (a chunk's beginning) may send 3 more.
    assert broker_allowance(Credit(5, 10), 97, 110) == 13


@pytest.mark.parametrize(
    ("streams", "path", "expected"),
    [
        ("s", "/api/queues/v%2F1/s", "queue object for stream 's'"),
        ("a,b", f"/api/queues/v%2F1{streambounds.listing_query(['a', 'b'])}", "list of the queues"),
    ],
)
def test_an_answer_of_the_wrong_shape_is_a_clear_error_for_one_stream_or_several(
    monkeypatch: pytest.MonkeyPatch, streams: str, path: str, expected: str
) -> None:
    asked: list[str] = []

    def answer(_: object, path: str, *__: object) -> object:
        asked.append(path)
        return "<html>a proxy's page</html>"

    monkeypatch.setattr(streamhttp.Session, "get", answer)
    settings = streamoptions.parse_stream_options(
        {"streams": streams, "uri": "amqp://u:p@h/v%2F1", "managementUri": "http://u:p@h:15672/"}
    )
    with pytest.raises(HutchConnectionError, match=f"answered no {expected}"):
        streambounds.fetch(settings, env={})
    assert asked == [path]
