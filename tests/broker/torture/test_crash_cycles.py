"""The bounded form of the crash torture suite (hutch_testing/torture.py): runs in CI.

Every cycle kills the broker (kill -9 or SIGTERM, at random) while confirm-mode and tx
publishers and every consumer pattern run, then checks that no confirmed message was lost
or duplicated and no corrupt body was served, and that no crash or stop logged an ERROR or
CRITICAL line: an ordinary kill -9 is not damage, a SIGTERM is not a failed write. Two stream
queues run through the same cycles (readers at random offsets; ``torture_streams``). The long
form is
``python -m hutch_testing.torture --cycles 100``; set HUTCH_TORTURE_SEED to replay a run.
"""

import os
import random
from pathlib import Path

import pytest
from hutch_testing import torture

CYCLES = int(os.environ.get("HUTCH_TORTURE_CYCLES", "8"))


@pytest.mark.slow
@pytest.mark.timeout(60 + CYCLES * 30)
def test_no_confirmed_message_is_lost_across_random_crashes(hutch_broker):
    seed = int(os.environ.get("HUTCH_TORTURE_SEED", random.randrange(1 << 30)))
    lines: list[str] = []
    results = torture.run(hutch_broker, cycles=CYCLES, seed=seed, log=lines.append)
    report = f"seed {seed} (HUTCH_TORTURE_SEED replays it)\n" + "\n".join(lines)
    assert all(r.confirmed for r in results), (
        "a cycle confirmed nothing: it tested nothing\n" + report
    )
    assert any(r.acked for r in results), "no consumer acked anything\n" + report
    # More than one transaction (1-10 publishes each) in some cycle: the tx publisher keeps going.
    assert max(r.transacted for r in results) > 10, report
    assert [r.lost for r in results if r.lost] == [], report
    assert [r.duplicated for r in results if r.duplicated] == [], report
    assert torture.loud_lines(Path(hutch_broker.console_log)) == [], report
    # Streams: readers got deliveries, and each restart left every confirmed message at its
    # offset, offsets dense and never reused, retention by whole segments (torture_streams).
    assert all(r.stream_confirmed for r in results), report
    assert sum(r.stream_read for r in results) > 0, report
    assert [r.stream_faults for r in results if r.stream_faults] == [], report
