"""The broker level's parallel pass hands out its long modules first.

Why: scripts/test.sh runs most of the broker level on two pytest-xdist workers, a whole module at
a time (``--dist loadfile``). xdist's own order is by number of tests, most first, which put
Spark's modules (a few tests, up to a minute or two each) at the end of the pass, where one
worker ran them alone after the other had run out of work. Here a worker's collection is
reordered so that the modules that run Spark (a test marked ``spark``) or say they are long (a
test marked ``slow``, or a ``timeout`` above the run's default) come first; the others follow by
number of tests, most first, as xdist would have handed them out. The rule reads only markers,
so there is no table of durations to keep up to date, and a new module gets its place from its
markers like any other.

The timeout counts because the tail was still uneven: the modules of one test come last, and
one of them built a wheel (10 s, ``timeout(180)``) second to last, beside a module of 0.4 s;
``tests/broker/amqp/test_tls_reload.py`` (``timeout(90)``, 20 s) was 33 modules from the end.
Modules that ask for more than the default say they may take it.

xdist must then keep the collected order: the pass runs with ``--no-loadscope-reorder``. Only a
worker's collection is reordered (every worker collects the same tests and orders them alike,
which xdist checks); a run in one process, such as the serial pass, keeps its order. A worker
cannot tell how its tests are handed out (xdist sets its ``dist`` option to "no"), and under
``--dist load`` long modules first is no worse. Pass ``-p no:hutch_testing.modorder`` to leave
the order to xdist, as before.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

import pytest

NAME = "hutch_testing.modorder"
LONG_MARKERS = frozenset({"spark", "slow"})
DEFAULT_TIMEOUT_S = 60.0  # pyproject's pytest timeout, when an item has no config to ask
T = TypeVar("T")


def long_first(
    items: Sequence[T], module: Callable[[T], str], long: Callable[[T], bool]
) -> list[T]:
    """``items`` with whole modules moved: the long ones first, then the others by number of
    tests, most first; ties and the tests inside a module keep their order (pure).

    ``module`` names an item's module, ``long`` says whether the item alone makes its module
    long. The result is a permutation of ``items``: nothing is added, dropped or repeated.
    """
    groups: dict[str, list[T]] = {}
    for item in items:
        groups.setdefault(module(item), []).append(item)
    is_long = {name: any(long(item) for item in tests) for name, tests in groups.items()}
    order = sorted(groups, key=lambda name: (not is_long[name], -len(groups[name])))
    return [item for name in order for item in groups[name]]


def is_long(item: pytest.Item) -> bool:
    """A test that makes its module long: it is marked ``spark`` or ``slow``, or its
    ``timeout`` marker allows more than the run's default timeout."""
    default = default_timeout(item)
    for mark in item.iter_markers():
        if mark.name in LONG_MARKERS:
            return True
        args = getattr(mark, "args", ())
        if mark.name == "timeout" and args and default and float(args[0]) > default:
            return True
    return False


def default_timeout(item: pytest.Item) -> float:
    """The run's ``timeout`` ini value (pytest-timeout's), 0 for none."""
    config = getattr(item, "config", None)
    if config is None:
        return DEFAULT_TIMEOUT_S
    try:
        return float(config.getini("timeout") or 0)
    except ValueError:  # an ini without pytest-timeout's option
        return 0.0


def module_of(item: pytest.Item) -> str:
    """The module part of the node id: what ``--dist loadfile`` hands out as one unit."""
    return item.nodeid.split("::", 1)[0]


def applies(config: pytest.Config) -> bool:
    """True on a pytest-xdist worker (the controller collects nothing)."""
    return getattr(config, "workerinput", None) is not None


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Reorders a worker's collection, after every other plugin has marked and sorted it."""
    if not applies(config):
        return
    items[:] = long_first(items, module_of, is_long)
