"""The parallel pass's module order (hutch_testing.modorder): long modules first, nothing lost.

Why: the broker level's parallel pass ended with one worker running Spark's modules alone; the
reorder moves them to the front. It must never change what runs: every collected test once, a
module's tests together and in their order, and outside an xdist worker no change at all.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from types import SimpleNamespace

import pytest
from hutch_testing import modorder


@dataclass
class _Item:
    """What the reorder reads of a collected test: its node id and its markers' names."""

    nodeid: str
    marks: tuple[str, ...] = ()
    timeout: float | None = None  # a ``timeout`` marker's seconds

    def iter_markers(self):
        timeouts = [] if self.timeout is None else [("timeout", (self.timeout,))]
        return (
            SimpleNamespace(name=name, args=args)
            for name, args in [(name, ()) for name in self.marks] + timeouts
        )


def _collection() -> list[_Item]:
    """A collection in file order: short modules with many tests, then two long ones."""
    return [
        _Item("tests/broker/test_a.py::test_1"),
        _Item("tests/broker/test_a.py::test_2"),
        _Item("tests/broker/test_b.py::test_1"),
        _Item("tests/broker/test_b.py::test_2"),
        _Item("tests/broker/test_b.py::test_3"),
        _Item("tests/broker/test_c.py::test_1"),
        _Item("tests/broker/test_d.py::test_1", ("slow",)),
        _Item("tests/spark/test_e.py::test_1"),  # unmarked: its module is long by test_2
        _Item("tests/spark/test_e.py::test_2", ("spark", "broker")),
        _Item("tests/spark/test_e.py::Case::test_3"),
    ]


def _ordered(items: list[_Item]) -> list[str]:
    return [
        item.nodeid for item in modorder.long_first(items, modorder.module_of, modorder.is_long)
    ]


def test_long_modules_come_first_then_the_most_tests_first():
    assert _ordered(_collection()) == [
        "tests/spark/test_e.py::test_1",  # long: 3 tests
        "tests/spark/test_e.py::test_2",
        "tests/spark/test_e.py::Case::test_3",
        "tests/broker/test_d.py::test_1",  # long: 1 test
        "tests/broker/test_b.py::test_1",  # 3 tests
        "tests/broker/test_b.py::test_2",
        "tests/broker/test_b.py::test_3",
        "tests/broker/test_a.py::test_1",  # 2 tests
        "tests/broker/test_a.py::test_2",
        "tests/broker/test_c.py::test_1",  # 1 test
    ]


def test_a_timeout_above_the_default_makes_a_module_long():
    """A module that asks for more than the run's 60 s says it may take it: it goes first."""
    items = [
        _Item("tests/a.py::test_1"),
        _Item("tests/a.py::test_2"),
        _Item("tests/short.py::test_1", timeout=30),
        _Item("tests/wheel.py::test_1"),
        _Item("tests/wheel.py::test_2", timeout=180),
        _Item("tests/edge.py::test_1", timeout=60),  # the default itself is not long
    ]
    assert _ordered(items) == [
        "tests/wheel.py::test_1",
        "tests/wheel.py::test_2",
        "tests/a.py::test_1",
        "tests/a.py::test_2",
        "tests/short.py::test_1",
        "tests/edge.py::test_1",
    ]


def test_the_default_timeout_is_the_runs_own(pytestconfig):
    """The fakes' default (no config) is pyproject's; a real item asks its config."""
    assert modorder.default_timeout(SimpleNamespace(config=pytestconfig)) == 60.0
    assert modorder.default_timeout(SimpleNamespace()) == modorder.DEFAULT_TIMEOUT_S == 60.0


@pytest.mark.parametrize("seed", range(20))
def test_the_order_is_a_permutation_with_every_module_together_and_in_its_own_order(seed):
    chooser = random.Random(seed)
    modules = [f"tests/m{index}/test_x.py" for index in range(chooser.randint(0, 12))]
    items = [
        _Item(
            f"{module}::test_{number}", chooser.choice(((), ("spark",), ("slow",), ("rabbitmq",)))
        )
        for module in modules
        for number in range(chooser.randint(1, 6))
    ]
    ordered = _ordered(items)
    assert sorted(ordered) == sorted(item.nodeid for item in items)
    assert len(set(ordered)) == len(ordered)
    seen = [modorder.module_of(_Item(nodeid)) for nodeid in ordered]
    runs = [module for index, module in enumerate(seen) if index == 0 or seen[index - 1] != module]
    assert len(runs) == len(set(runs))  # each module is one block: one unit for --dist loadfile
    for module in set(seen):
        inside = [nodeid for nodeid in ordered if nodeid.startswith(module + "::")]
        assert inside == [item.nodeid for item in items if item.nodeid.startswith(module + "::")]


def _config(*, worker: bool) -> SimpleNamespace:
    """A config as a pytest-xdist worker sees it: its ``dist`` option is always "no" there."""
    config = SimpleNamespace(option=SimpleNamespace(dist="no"))
    if worker:
        config.workerinput = {"workerid": "gw0", "workercount": 2}
    return config


@pytest.mark.parametrize(
    ("worker", "reordered"),
    [
        (True, True),
        (False, False),  # one process: the serial pass, the fast and node levels
    ],
)
def test_only_a_workers_collection_is_reordered(worker, reordered):
    items = _collection()
    before = [item.nodeid for item in items]
    modorder.pytest_collection_modifyitems(_config(worker=worker), items)  # type: ignore[arg-type]
    after = [item.nodeid for item in items]
    assert (after != before) is reordered
    assert after == (_ordered(_collection()) if reordered else before)
