"""A kill test's child driver ends when the test that started it is gone.

Why: the children (driver_child.py, stream_child.py) have no deadline of their own, since a
total bound fails healthy runs on a loaded machine; what ends one whose test failed, timed out
or was killed before it could kill the child is `childsession.run_until` noticing that its
parent is no longer its parent. A child with no deadline and no such check would hold a
SparkSession (~1.5 GB) and a broker connection for good.

The grandchild here runs `run_until` with a query that never fails and a condition that never
holds, as a hanging stream_child does, but without Spark: the check is the same code, and the
JVM ends with the process that started it (it reads its stdin until it closes). The test knows
the grandchild ended when the pipe it holds reaches end of file.
"""

import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.broker  # starts processes

HERE = Path(__file__).parent

# A query that runs for good, and a session; the grandchild says "ready <pid>" on the pipe
# only once it is in run_until's loop (its first exception() call).
GRANDCHILD = """
import os, sys
sys.path.insert(0, sys.argv[1])
import childsession
fd = int(sys.argv[2])

class Query:
    told = False
    def exception(self):
        if not self.told:
            os.write(fd, f"ready {os.getpid()}\\n".encode())
            self.told = True
        return None
    def stop(self):
        pass

childsession.run_until(Query(), Query(), lambda: False)
"""

# The grandchild's parent: starts it with the pipe and waits to be killed.
PARENT = """
import subprocess, sys, time
fd = int(sys.argv[1])
subprocess.Popen([sys.executable, "-c", sys.argv[2], sys.argv[3], str(fd)], pass_fds=(fd,),
                 stderr=open(sys.argv[4], "wb"))
time.sleep(3600)
"""

ENDS_WITHIN_S = 30  # it polls every 0.2 s; the bound is only how long a broken check takes


def read_line(fd: int, timeout: float) -> bytes:
    line = b""
    while not line.endswith(b"\n"):
        ready, _, _ = select.select([fd], [], [], timeout)
        assert ready, f"nothing on the pipe for {timeout} s (so far {line!r})"
        chunk = os.read(fd, 1)
        assert chunk, f"the pipe closed before a line (so far {line!r})"
        line += chunk
    return line


def test_a_child_ends_when_its_parent_is_gone(tmp_path: Path) -> None:
    read_end, write_end = os.pipe()
    log = tmp_path / "grandchild.log"
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT, str(write_end), GRANDCHILD, str(HERE), str(log)],
        pass_fds=(write_end,),
    )
    os.close(write_end)  # the grandchild holds the only write end left once the parent is gone
    grandchild = 0
    try:
        word, pid = read_line(read_end, ENDS_WITHIN_S).split()
        assert word == b"ready"
        grandchild = int(pid)
        parent.kill()
        parent.wait(30)

        since = time.monotonic()
        while True:  # end of file: every holder of the write end has exited
            left = ENDS_WITHIN_S - (time.monotonic() - since)
            ready, _, _ = select.select([read_end], [], [], max(left, 0))
            assert ready, f"the child still runs {ENDS_WITHIN_S} s after its parent ended"
            if not os.read(read_end, 4096):
                break
        grandchild = 0
        assert "the parent is gone: ending" in log.read_text()
    finally:
        os.close(read_end)
        if parent.poll() is None:
            parent.kill()
            parent.wait(30)
        if grandchild:
            os.kill(grandchild, signal.SIGKILL)
