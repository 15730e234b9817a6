"""readTimeoutMs as a deadline (streamreads.ReadDeadline), in memory with a clock the test moves:
the time a read may go without a delivery of its slice, which heartbeats and other frames (reads
that bring no delivery) do not extend. The same on a real broker sending heartbeats:
test_streamreads.py::test_heartbeats_do_not_extend_the_read_timeout.
"""

import pytest
from hutch_spark.streamreads import ReadDeadline


def test_reads_without_a_delivery_wait_only_for_what_is_left() -> None:
    deadline = ReadDeadline(3.0, now=100.0)
    assert deadline.wait_s(0, now=100.0) == 3.0
    # a heartbeat every second wakes the reader: the wait shrinks, it does not start again
    assert deadline.wait_s(0, now=101.0) == 2.0
    assert deadline.wait_s(0, now=102.5) == 0.5
    with pytest.raises(TimeoutError, match="no delivery for 3 s"):
        deadline.wait_s(0, now=103.0)


def test_a_new_delivery_restarts_the_clock_and_only_a_new_one() -> None:
    deadline = ReadDeadline(2.5, now=0.0)
    assert deadline.wait_s(4, now=2.0) == 2.5  # four deliveries came: 2.5 s from now
    assert deadline.wait_s(4, now=4.0) == 0.5  # the same count: no restart
    assert deadline.wait_s(5, now=4.4) == 2.5
    with pytest.raises(TimeoutError, match=r"no delivery for 2\.5 s"):
        deadline.wait_s(5, now=7.0)
