"""The warning `hutch_spark.register` gives a session whose Python workers use TCP
(`sessionconf.PYTHON_SOCKETS`: each Python task's input waited about 40 ms there)."""

from __future__ import annotations

import logging
from typing import Any

import hutch_spark
import pytest
from hutch_spark import sessionconf

KEY = "spark.python.unix.domain.socket.enabled"


@pytest.mark.parametrize("value", ["true", "TRUE", " true "])
def test_a_unix_socket_needs_no_advice(value: str) -> None:
    assert sessionconf.python_sockets_advice(value) is None


@pytest.mark.parametrize(("value", "named"), [(None, "not set"), ("false", "'false'")])
def test_tcp_gets_advice_naming_the_conf(value: str | None, named: str) -> None:
    advice = sessionconf.python_sockets_advice(value)
    assert advice is not None
    assert f"({KEY} is {named})" in advice
    assert f"--conf {KEY}=true" in advice


class _Conf:
    def __init__(self, values: dict[str, str]) -> None:
        self.values = values

    def get(self, key: str, default: Any = None) -> Any:
        return self.values.get(key, default)


class _Session:
    """What register touches of a SparkSession: the data source registry and both confs."""

    def __init__(self, context_conf: dict[str, str]) -> None:
        self.registered: list[type] = []
        self.dataSource = self
        self.sparkContext = self
        self._context_conf = _Conf(context_conf)
        self.conf = _Conf({})

    def register(self, source: type) -> None:
        self.registered.append(source)

    def getConf(self) -> _Conf:  # noqa: N802 - SparkContext's name
        return self._context_conf


def test_register_warns_only_without_the_socket(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="hutch_spark"):
        tcp = _Session({})
        hutch_spark.register(tcp)  # type: ignore[arg-type]
        assert [record.getMessage() for record in caplog.records] == [
            sessionconf.python_sockets_advice(None)
        ]
        caplog.clear()
        unix = _Session({KEY: "true"})
        hutch_spark.register(unix)  # type: ignore[arg-type]
        assert caplog.records == []
    assert tcp.registered == unix.registered and len(unix.registered) == 1
