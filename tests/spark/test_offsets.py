"""Offsets and the ack ledger: which tag to ack, and never one from a closed channel."""

import pytest
from hutch_spark import offsets
from hutch_spark.errors import HutchOffsetError


def test_offset_round_trip() -> None:
    assert offsets.seq_of(offsets.make("q", 42), "q") == 42


def test_offset_of_another_queue_names_both_and_the_fix() -> None:
    with pytest.raises(HutchOffsetError, match=r"queue .old.*queue .new.*new checkpointLocation"):
        offsets.seq_of({"queue": "old", "seq": 1}, "new")


@pytest.mark.parametrize("seq", [-1, "3", None, True])
def test_malformed_offset(seq: object) -> None:
    with pytest.raises(HutchOffsetError, match="malformed offset"):
        offsets.seq_of({"queue": "q", "seq": seq}, "q")


def test_ledger_acks_the_highest_tag_through_seq() -> None:
    ledger = offsets.AckLedger()
    ledger.record(end_seq=100, epoch=1, last_tag=100)
    ledger.record(end_seq=200, epoch=1, last_tag=200)
    ledger.record(end_seq=300, epoch=1, last_tag=300)
    assert ledger.release_through(200, epoch=1) == 200
    assert len(ledger) == 1
    assert ledger.release_through(200, epoch=1) is None  # nothing left at or below 200


def test_ledger_drops_entries_of_a_closed_channel() -> None:
    ledger = offsets.AckLedger()
    ledger.record(end_seq=100, epoch=1, last_tag=100)
    ledger.record(end_seq=150, epoch=2, last_tag=50)
    assert ledger.release_through(150, epoch=2) == 50  # never tag 100 on channel 2
    ledger.record(end_seq=200, epoch=2, last_tag=100)
    assert ledger.release_through(200, epoch=None) is None  # disconnected: nothing to ack
    assert len(ledger) == 0


def test_per_queue_offsets_round_trip_and_keep_the_single_queue_shape() -> None:
    seqs = {"a": 3, "b": 0}
    offset = offsets.make_many(seqs, per_queue=True)
    assert offset == {"queues": {"a": 3, "b": 0}}
    assert offsets.seqs_of(offset, ("a", "b"), per_queue=True) == seqs
    assert offsets.make_many({"a": 3}, per_queue=False) == {"queue": "a", "seq": 3}
    assert offsets.seqs_of({"queue": "a", "seq": 3}, ("a",), per_queue=False) == {"a": 3}


@pytest.mark.parametrize(
    "offset",
    [{"queues": {"a": 1, "c": 2}}, {"queues": {"a": 1}}, {"queue": "a", "seq": 1}],
)
def test_per_queue_offsets_of_other_queues_are_refused(offset: dict) -> None:
    with pytest.raises(HutchOffsetError, match="use a new checkpointLocation"):
        offsets.seqs_of(offset, ("a", "b"), per_queue=True)


def test_per_queue_offset_with_a_malformed_seq() -> None:
    with pytest.raises(HutchOffsetError, match="malformed offset"):
        offsets.seqs_of({"queues": {"a": -1, "b": 0}}, ("a", "b"), per_queue=True)
