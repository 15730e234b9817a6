"""A starting vhost worker's beat: a byte at once, then one a second while its main thread works.

The decision and the /proc parsing in memory; the main thread's own counters read from /proc
(they move when it reads a file, and a sleeping thread's do not); and the beating thread over a
real Unix socket pair with a scripted sampler: a byte at start, a byte for each interval with
progress and none for an interval without, and no byte after ``stop``. The listener's side of
the rule is in test_liveness.py, a whole broker's start that hangs in test_vhost_workers.py.
"""

from __future__ import annotations

import os
import socket
import threading
import time

import pytest
from hutch_broker.server import handover, startbeat
from hutch_broker.server.startbeat import Sample

A, B = Sample(10, 4096, 0), Sample(11, 4096, 0)


def test_progress_is_any_counter_that_moved_and_an_unreadable_sample_counts_as_progress():
    assert not startbeat.progressed(A, A)
    assert startbeat.progressed(A, B)
    assert startbeat.progressed(A, Sample(10, 4097, 0))  # a read, no CPU tick yet
    assert startbeat.progressed(A, Sample(10, 4096, 1))  # a write
    assert startbeat.progressed(None, A)
    assert startbeat.progressed(A, None)


def test_a_thread_s_stat_and_io_are_parsed_past_a_command_with_spaces_and_parentheses():
    stat = "4242 (python (worker) 1) S 1 4242 4242 0 -1 4194560 100 0 0 0 57 13 0 0 20 0 3 0"
    io = "rchar: 123456\nwchar: 789\nsyscr: 12\nsyscw: 3\nread_bytes: 0\n"
    assert startbeat.parse(stat, io) == Sample(cpu_ticks=70, read_bytes=123456, written_bytes=789)
    with pytest.raises(KeyError):
        startbeat.parse(stat, "syscr: 12\n")


def test_the_main_thread_s_own_counters_move_when_it_reads_and_not_while_it_sleeps(tmp_path):
    pid, tid = os.getpid(), threading.get_native_id()
    path = tmp_path / "data"
    path.write_bytes(b"x" * 65536)
    before = startbeat.sample_thread(pid, tid)
    path.read_bytes()
    after = startbeat.sample_thread(pid, tid)
    assert before is not None and after is not None
    assert after.read_bytes >= before.read_bytes + 65536

    samples: list[Sample | None] = []
    sleeper = threading.Thread(target=time.sleep, args=(0.5,))
    sleeper.start()
    sleeping = sleeper.native_id
    assert sleeping is not None
    time.sleep(0.1)  # past its start: asleep from here on
    samples.append(startbeat.sample_thread(pid, sleeping))
    time.sleep(0.2)
    samples.append(startbeat.sample_thread(pid, sleeping))
    sleeper.join()
    assert samples[0] is not None and samples[0] == samples[1]  # another thread's work: not its
    assert startbeat.sample_thread(pid, 2**22 + 7) is None  # no such thread


@pytest.mark.broker  # a socket pair
def test_the_thread_beats_at_once_then_only_for_intervals_with_progress_and_never_after_stop():
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    script = iter([A, A, B, B, B, Sample(12, 0, 0)])  # progress in the 2nd and 5th intervals
    taken: list[Sample | None] = []

    def sample() -> Sample | None:
        value = next(script, None)
        if value is None:
            return taken[-1]  # the script is over: no progress from here on
        taken.append(value)
        return value

    beat = startbeat.StartBeat(theirs, interval_s=0.02, sample=sample).start()
    try:
        ours.settimeout(10)
        assert ours.recv(1) == handover.ANSWER  # at once
        deadline = time.monotonic() + 10
        while len(taken) < 6:
            assert time.monotonic() < deadline, "the thread stopped sampling"
            time.sleep(0.01)
        time.sleep(0.1)  # a few intervals more, none with progress
    finally:
        beat.stop()
    ours.setblocking(False)
    received = ours.recv(64)
    assert received == handover.ANSWER * 2  # the 2nd and 5th intervals
    assert beat.beats == 3
    time.sleep(0.05)
    with pytest.raises(BlockingIOError):
        ours.recv(64)  # nothing after stop
    ours.close()
    theirs.close()
