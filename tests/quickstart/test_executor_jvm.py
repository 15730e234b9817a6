"""Executors below a whole core run their JVM with C1 only (sparksubmit.FRACTIONAL_EXECUTOR_JVM).

Why: docs/spark.md's spark-submit command gives each executor a fraction of a core, on which
the JVM's optimizing compiler took about a third of an executor's CPU through a stream read
and kept two executors under 1.6x what one reads (docs/bench/report.md). The submission decides
from the executors' CPU request alone, so a whole-core executor keeps the JVM's default, and a
user's own ``extra_confs`` still win.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hutch_demo import sparksubmit

OPTION = "spark.executor.extraJavaOptions"


def submission(request_cores: str, **extra: str) -> sparksubmit.Submission:
    return sparksubmit.Submission(
        api_server="https://127.0.0.1:1", namespace="apps", broker="hutch", queue="q",
        credentials_secret="s", claim="c", pod_template=Path("t.json"),
        request_cores=request_cores, extra_confs=extra,
    )  # fmt: skip


@pytest.mark.parametrize("request_cores", ["200m", "999m", "0.3", " 500m "])
def test_a_fractional_executor_runs_c1_only(request_cores: str) -> None:
    confs = sparksubmit.confs(submission(request_cores))
    assert confs[OPTION] == "-XX:TieredStopAtLevel=1"
    assert "spark.driver.extraJavaOptions" not in confs  # the driver keeps the JVM's default
    command = sparksubmit.command(submission(request_cores))
    assert command[command.index(f"{OPTION}=-XX:TieredStopAtLevel=1") - 1] == "--conf"


@pytest.mark.parametrize("request_cores", ["1", "1000m", "2", "1.5"])
def test_a_whole_core_executor_keeps_the_jvms_default(request_cores: str) -> None:
    assert OPTION not in sparksubmit.confs(submission(request_cores))


def test_the_users_own_executor_options_win() -> None:
    confs = sparksubmit.confs(submission("200m", **{OPTION: "-Xss4m"}))
    assert confs[OPTION] == "-Xss4m"


@pytest.mark.parametrize("bad", ["", "m", "two", "1.5m", "200Mi"])
def test_a_cpu_request_that_is_no_quantity_is_refused(bad: str) -> None:
    with pytest.raises(ValueError, match="not a CPU quantity"):
        sparksubmit.cores(bad)


def test_the_submission_gives_python_workers_a_unix_socket() -> None:
    # hutch_spark.sessionconf.PYTHON_SOCKETS: no 40 ms wait for each Python task's input
    confs = sparksubmit.confs(submission("1"))
    assert confs["spark.python.unix.domain.socket.enabled"] == "true"
    mine = submission("1", **{"spark.python.unix.domain.socket.enabled": "false"})
    assert sparksubmit.confs(mine)["spark.python.unix.domain.socket.enabled"] == "false"
