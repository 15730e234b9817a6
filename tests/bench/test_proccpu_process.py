"""bench/proccpu.run on real processes: the CPU of a command and of the children it waited for.

Why: the load generator's CPU is read from its /proc entry after it exits and before it is
reaped; read a moment later the entry is gone, read before the exit it misses the end. A
command that burns a known amount of CPU itself and in a child it waits for must come out
with at least both amounts, and its output and exit status must come through unchanged.
"""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))

import proccpu  # noqa: E402

pytestmark = pytest.mark.broker  # starts processes

BURN = "import time\nt = time.process_time()\nwhile time.process_time() - t < {seconds}: pass\n"


def test_a_commands_cpu_includes_the_children_it_waited_for() -> None:
    script = textwrap.dedent(
        f"""
        import subprocess, sys
        exec({BURN.format(seconds=0.3)!r})
        subprocess.run([sys.executable, "-c", {BURN.format(seconds=0.4)!r}], check=True)
        print("done")
        sys.exit(3)
        """
    )
    finished = proccpu.run([sys.executable, "-c", script], timeout=120)
    assert (finished.returncode, finished.stdout) == (3, "done\n")
    assert finished.cpu_seconds is not None
    assert finished.cpu_seconds >= 0.7 - 0.02  # tick rounding
    assert finished.wall_seconds >= finished.cpu_seconds - 0.05


def test_a_command_past_its_timeout_is_killed_and_reported() -> None:
    with pytest.raises(proccpu.RunTimeoutError, match="did not finish within 0s"):
        proccpu.run([sys.executable, "-c", "import time; time.sleep(60)"], timeout=0.2)
