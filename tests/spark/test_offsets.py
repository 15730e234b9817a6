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
