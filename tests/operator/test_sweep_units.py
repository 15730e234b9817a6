"""Pure parts of the sweep and of recovery: snapshot freshness, the waiting-for-Broker index."""

from __future__ import annotations

from hutch_operator import snapshots


def test_a_listing_older_than_the_last_write_is_not_used() -> None:
    """Defect 6: only a listing started after the operator's last write to that broker serves."""
    entry = (100.0, 10.0, [{"name": "q"}])
    assert snapshots.usable(entry, written=5.0, now=50.0)
    assert not snapshots.usable(entry, written=10.0, now=50.0)  # written as the list started
    assert not snapshots.usable(entry, written=20.0, now=50.0)
    assert not snapshots.usable(entry, written=5.0, now=100.0)  # expired
    assert not snapshots.usable(None, written=0.0, now=0.0)
