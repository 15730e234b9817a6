"""How many hutch-broker processes each test module starts: ``pytest --broker-starts[=FILE]``.

Why: a hutch-broker start costs 1.4-2.1 s on a loaded CI machine, and the broker level's time
(issue #29) turns on how many of them it makes. The modules that start the most brokers per test
are where one broker per module (``shared_broker``, ``hutch_testing.vhosts``) pays, so that is
what this counts, per module, instead of guessing it from the fixtures a test names (which
misses the brokers a module starts itself, a restart, and a TLS broker).

The count is ``brokers.HutchBroker.launches``, a plain counter bumped at every launch, read when
a test starts and when it ends: what launched in between is the test's module's (its module- and
session-scoped fixtures included, as they start in the first test that needs them); what
launched between tests is counted as outside a test. Counting is always on and costs nothing;
only ``--broker-starts`` prints the table (the modules that started a broker, most starts
first) and with a FILE also writes it as JSON. Under pytest-xdist each worker sends its counts
to the controller at its end, which prints one table for the run. In-process servers
(``tests/broker/conftest.py``'s ``server``) are not processes and not counted.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pytest

from hutch_testing.brokers import HutchBroker

NAME = "hutch_testing.brokerstarts"
OPTION = "--broker-starts"
OUTSIDE = "(outside a test)"
_WORKER_KEY = "hutch_broker_starts"


@dataclass
class ModuleStarts:
    """One module's count: tests run, brokers started (first launch), restarts (a later one)."""

    tests: int = 0
    starts: int = 0
    restarts: int = 0

    def add(self, other: ModuleStarts) -> None:
        self.tests += other.tests
        self.starts += other.starts
        self.restarts += other.restarts


def merge(
    into: dict[str, ModuleStarts], counts: Mapping[str, Mapping[str, int]]
) -> dict[str, ModuleStarts]:
    """Adds a worker's counts (as sent, module -> fields) to ``into`` and returns it (pure)."""
    for module, fields in counts.items():
        into.setdefault(module, ModuleStarts()).add(ModuleStarts(**fields))
    return into


def rows(counts: Mapping[str, ModuleStarts]) -> list[str]:
    """The report's lines: the modules that launched a broker, most starts (then restarts)
    first, and a total over every module (pure)."""
    launched = [(module, c) for module, c in counts.items() if c.starts or c.restarts]
    launched.sort(key=lambda pair: (-pair[1].starts, -pair[1].restarts, pair[0]))
    lines = [f"{'starts':>6} {'restarts':>8} {'tests':>5} {'per test':>8}  module"]
    for module, c in launched:
        per_test = f"{c.starts / c.tests:.2f}" if c.tests else "-"
        lines.append(f"{c.starts:6d} {c.restarts:8d} {c.tests:5d} {per_test:>8}  {module}")
    whole = total(counts.values())
    lines.append(
        f"{whole.starts:6d} {whole.restarts:8d} {whole.tests:5d} {'':>8}  "
        f"total, {len(launched)} of {len(counts)} modules launched a broker"
    )
    return lines


class StartCounter:
    """The hooks: read ``HutchBroker.launches`` at each test's start and end. On an xdist
    controller, which hears of its workers' tests but launches nothing, only the workers'
    counts are added up."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.counts: dict[str, ModuleStarts] = {}
        self._seen = (0, 0)

    def _controller(self) -> bool:
        return self.config.pluginmanager.has_plugin("dsession")  # xdist's, registered with -n

    def _take(self, module: str) -> ModuleStarts:
        """Adds the launches since the last look to ``module`` and returns its count."""
        now = (HutchBroker.launches["start"], HutchBroker.launches["restart"])
        count = self.counts.setdefault(module, ModuleStarts())
        count.starts += now[0] - self._seen[0]
        count.restarts += now[1] - self._seen[1]
        self._seen = now
        return count

    def pytest_runtest_logstart(self, nodeid: str, location: object) -> None:
        if self._controller():
            return
        self._take(OUTSIDE)
        self._take(module_of(nodeid)).tests += 1

    def pytest_runtest_logfinish(self, nodeid: str, location: object) -> None:
        if self._controller():
            return
        self._take(module_of(nodeid))

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        outside = self._take(OUTSIDE)  # after the last test: the session fixtures' teardown
        if not outside.starts and not outside.restarts:
            del self.counts[OUTSIDE]
        workeroutput = getattr(session.config, "workeroutput", None)
        if workeroutput is not None:  # an xdist worker: the controller reports
            workeroutput[_WORKER_KEY] = {module: asdict(c) for module, c in self.counts.items()}

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: object) -> None:
        merge(self.counts, getattr(node, "workeroutput", {}).get(_WORKER_KEY, {}))

    def pytest_terminal_summary(self, terminalreporter: Any, config: pytest.Config) -> None:
        target = config.getoption(OPTION)
        if target is None or hasattr(config, "workeroutput"):
            return
        terminalreporter.write_sep("=", "hutch-broker starts per module")
        for line in rows(self.counts):
            terminalreporter.write_line(line)
        if target:
            report = {module: asdict(c) for module, c in self.counts.items()}
            Path(target).write_text(json.dumps(report, indent=1, sort_keys=True) + "\n")
            terminalreporter.write_line(f"written to {target}")


def module_of(nodeid: str) -> str:
    """The module part of a test's node id (pure)."""
    return nodeid.split("::", 1)[0]


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.getgroup("hutch").addoption(
        OPTION,
        nargs="?",
        const="",
        default=None,
        metavar="FILE",
        help="print how many hutch-broker processes each module started (and write it to FILE "
        "as JSON); see hutch_testing.brokerstarts",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(StartCounter(config), f"{NAME}.counter")


def total(counts: Iterable[ModuleStarts]) -> ModuleStarts:
    """The sum of ``counts`` (pure)."""
    result = ModuleStarts()
    for count in counts:
        result.add(count)
    return result
