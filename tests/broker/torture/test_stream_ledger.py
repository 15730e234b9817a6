"""The crash cycles' stream checks (hutch_testing/torture_streams.py), on made-up reads.

Why: the torture run passing says nothing unless its checks fail on what they are there to
catch. Each case below is one defect a broker could have after a crash (a confirmed message
gone, an offset reused, a gap, a reader that skipped, retention that dropped more than whole
segments) written as the reads that defect would produce.
"""

from hutch_testing import torture_streams as ts

PLAIN, RETAINED = ts.PLAIN, ts.RETAINED


def _read(ids: list[str], first: int = 0, size: int = 600) -> ts.Read:
    return ts.Read(list(range(first, first + len(ids))), ids, size * len(ids), 1)


def _check(history, prefix, confirmed, seen, plain, retained=None):
    found = {PLAIN: plain, RETAINED: retained or ts.Read([], [], 0, 0)}
    return history.check(prefix, confirmed, seen, found)


def test_a_clean_cycle_passes_and_is_remembered():
    history, seen = ts.History(), ts.Seen()
    session = ts.Session(PLAIN, "first", None)
    seen.sessions.append(session)
    seen.saw(session, 0, "c0.p0-1")
    seen.saw(session, 1, "c0.p0-2")
    lost, faults, dropped = _check(
        history, "c0.", {PLAIN: {"c0.p0-1", "c0.p0-2"}}, seen, _read(["c0.p0-1", "c0.p0-2"])
    )
    assert (lost, faults, dropped) == ([], [], 0)
    assert history.end(PLAIN) == 2


def _after_first_cycle() -> ts.History:
    history = ts.History()
    _check(history, "c0.", {PLAIN: {"a", "b"}}, ts.Seen(), _read(["a", "b"]))
    return history


def test_a_confirmed_message_of_an_earlier_cycle_gone_is_lost():
    lost, faults, _ = _check(_after_first_cycle(), "c1.", {}, ts.Seen(), _read(["a"]))
    assert lost == ["stream@1/b (seen, now gone)", "stream/b"]
    assert faults == []


def test_an_offset_given_to_another_message_is_a_fault():
    history = _after_first_cycle()
    _, faults, _ = _check(history, "c1.", {}, ts.Seen(), _read(["a", "c1.p0-1"]))
    assert "stream@1 reused: b then c1.p0-1" in faults
    assert "stream: this cycle's offset 1 is below 2" in faults


def test_an_offset_a_reader_saw_and_a_restart_changed_is_a_fault():
    seen = ts.Seen()
    session = ts.Session(PLAIN, "next", None)
    seen.sessions.append(session)
    seen.saw(session, 2, "c1.p0-1")  # delivered before the crash, never confirmed
    _, faults, _ = _check(_after_first_cycle(), "c1.", {}, seen, _read(["a", "b", "c1.p0-9"]))
    assert faults == ["stream@2 reused: c1.p0-1 then c1.p0-9"]


def test_a_gap_in_the_offsets_and_a_plain_stream_that_dropped_are_faults():
    read = ts.Read([1, 3], ["a", "b"], 1200, 1)
    _, faults, _ = _check(ts.History(), "c0.", {PLAIN: {"a", "b"}}, ts.Seen(), read)
    assert faults == [
        "stream: offsets not dense from 1",
        "stream: first offset 1, nothing may be dropped",
    ]


def test_a_reader_that_skipped_or_started_elsewhere_is_a_fault():
    seen = ts.Seen()
    for kind, start, offsets in [("offset", 1, [0, 1]), ("first", None, [1, 3])]:
        session = ts.Session(PLAIN, kind, start)
        seen.sessions.append(session)
        for offset in offsets:
            seen.saw(session, offset, "abcd"[offset])
    _, faults, _ = _check(ts.History(), "c0.", {}, seen, _read(list("abcd")))
    assert faults == [
        "stream: a reader from 1 began at 0",
        "stream: a first reader skipped: [1, 3]...",
        "stream: a reader from first began at 1",
    ]


def test_retention_that_kept_less_than_whole_segments_allow_is_a_fault():
    kept = ["k1", "k2"]  # 1,200 bytes of a 30,000-byte limit: far more than a segment went
    _, faults, dropped = _check(
        ts.History(), "c0.", {}, ts.Seen(), _read([]), _read(kept, first=90)
    )
    assert dropped == 90
    assert faults == ["stream.ret: only 1200 bytes kept, more than dropped"]
    many = [f"m{i}" for i in range(50)]  # 30,000 bytes at offsets 40..89: within the bounds
    _, faults, _ = _check(ts.History(), "c0.", {}, ts.Seen(), _read([]), _read(many, first=40))
    assert faults == []


def test_more_confirmed_in_a_retained_stream_than_it_has_offsets_is_a_loss():
    confirmed = {RETAINED: {f"x{i}" for i in range(60)}}
    many = [f"x{i}" for i in range(50)]
    lost, _, _ = _check(ts.History(), "c0.", confirmed, ts.Seen(), _read([]), _read(many, 5))
    assert lost == ["stream.ret: 60 messages known, 55 offsets"]
