"""bench/inprocess_bench.py: the three paths run to the end and report a figure each (in process,
no broker process: the paths it times are checked to have delivered and settled everything)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import inprocess_bench
from hutch_broker import native


def test_the_paths_deliver_everything_and_report_cpu_per_message(tmp_path, capsys):
    assert inprocess_bench.one_flow(1000) > 0
    assert inprocess_bench.queued(1000) > 0
    assert inprocess_bench.stream(2000, tmp_path / "data") > 0
    assert inprocess_bench.main(["--rounds", "1", "--messages", "1000"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"hutch_broker: {Path(inprocess_bench.hutch_broker.__file__).parent}"
    # the source tree: nothing compiled but the C its install builds (docs/broker.md)
    built = sorted(native.LOADED)
    listed = f" ({', '.join(built)})" if built else ""
    assert lines[1] == f"extension modules: {len(built)}{listed}"
    assert [line.split()[0] for line in lines[2:]] == ["one-flow", "queued", "stream"]
    assert all("µs/message CPU (" in line for line in lines[2:])


def test_a_run_too_small_to_mean_anything_is_refused(capsys):
    with pytest.raises(SystemExit):
        inprocess_bench.main(["--messages", "10"])
    assert "--messages 1000 or more" in capsys.readouterr().err
