"""make run's Spark job runs its JVMs with C1 only (sparkpods.SHORT_JOB_CONFS).

Why: the flags reach the driver and executor JVMs through spark-submit confs; a misspelt
flag stops every JVM from starting, and a conf the quickstart forgot to pass would silently
give back the slow start. So: the host's java accepts the very options, the quickstart hands
them to its submission, and the command carries each as one argument.
"""

from __future__ import annotations

import concurrent.futures
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from hutch_demo import chain, quickstart, sparkpods, sparksubmit

pytestmark = pytest.mark.broker  # level broker: a broker and Spark job of its own


def test_the_jvm_accepts_the_options() -> None:
    java = shutil.which("java")
    if java is None:
        pytest.skip("no java here (make run installs it)")
    done = subprocess.run([java, *sparkpods.SHORT_JOB_JVM.split(), "-version"],
                          capture_output=True, text=True, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr


def test_the_quickstart_submits_with_them_and_the_command_keeps_each_whole(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    seen: dict[str, Any] = {}

    def submit(*_args: Any, **options: Any) -> Any:
        seen.update(options)
        raise RuntimeError("stop here")

    monkeypatch.setattr(sparkpods, "submit", submit)
    line = chain.Chain.__new__(chain.Chain)
    line.cluster, line.namespace, line.work_dir = _Cluster(), "quickstart", tmp_path  # type: ignore[assignment]
    line.broker_names, line.brokers = ("hutch",), {"hutch": chain.BrokerHandle("hutch")}
    image: concurrent.futures.Future[str] = concurrent.futures.Future()
    image.set_result("localhost/hutch/hutch-spark:0.1.0")
    with pytest.raises(RuntimeError, match="stop here"):
        quickstart._submit(_Report(), line, image)
    assert seen["extra_confs"] == sparkpods.SHORT_JOB_CONFS

    sub = sparksubmit.Submission(
        api_server="https://127.0.0.1:1", namespace="quickstart", broker="hutch",
        queue=sparkpods.JOB_QUEUE, claim="spark-data", pod_template=tmp_path / "t.json",
        credentials_secret="s", extra_confs=seen["extra_confs"],
    )  # fmt: skip
    command = sparksubmit.command(sub)
    for role in ("driver", "executor"):
        conf = f"spark.{role}.extraJavaOptions={sparkpods.SHORT_JOB_JVM}"
        assert command[command.index(conf) - 1] == "--conf"


class _Cluster:
    plane = None


class _Report:
    def say(self, _text: str) -> None:
        pass
