"""bench/run.py on a machine without the reference broker: told before the first round.

A fresh machine has no RabbitMQ until scripts/install-rabbitmq.sh runs. The bench used to start
round 1, record "rabbitmq did not start" in the JSON of every RabbitMQ cell and run Hutch's
cells beside them for a quarter of an hour, with no line in its log saying so.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))

import run  # noqa: E402


def test_a_missing_rabbitmq_stops_the_bench_before_anything_starts(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    monkeypatch.setattr(run.rabbitmq, "installed", lambda: False)

    def no_broker(*args: object, **kwargs: object) -> None:
        raise AssertionError("no broker may start")

    monkeypatch.setattr(run, "bench_broker", no_broker)
    output = tmp_path / "out.json"
    assert run.main(["--duration", "1", "--output", str(output)]) == 2
    err = capsys.readouterr().err
    assert "RabbitMQ 3.10.8 is not installed" in err
    assert "scripts/install-rabbitmq.sh" in err
    assert not output.exists()


def test_hutch_alone_needs_no_rabbitmq(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(run.rabbitmq, "installed", lambda: False)
    assert run.missing_brokers(["hutch"]) == []
    assert len(run.missing_brokers(["rabbitmq", "hutch"])) == 1
    monkeypatch.setattr(run.rabbitmq, "installed", lambda: True)
    assert run.missing_brokers(["rabbitmq", "hutch"]) == []
