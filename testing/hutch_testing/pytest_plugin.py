"""pytest fixtures for brokers on loopback: the reference RabbitMQ node and fresh hutch-brokers.

Why: side-by-side tests compare hutch-broker with RabbitMQ 3.10.8, so both must be one fixture away.
The reference node boots in ~5-7 s, so there is one per session; tests share it and use unique
names. ``hutch_broker_factory`` starts fresh hutch-brokers, each with its own data directory under
tmp_path (kept by pytest for the last runs, with the broker's console.log); the fixtures a test
reaches its broker through (``hutch_broker``, ``connection``, ...) are in
``hutch_testing.broker_plugin``.

A missing or broken reference node skips its tests on a developer machine but ERRORs them in CI
(env `CI` set) or with `HUTCH_REFERENCE_REQUIRED=1`, so CI can never go green without it.

It also gives every collected test its level (``hutch_testing.levels``: fast, broker, node, e2e)
as a marker, so ``-m fast`` selects the fast level, and guards the fast level: a fast test that
starts a process or opens a socket fails, saying what it did and where it belongs; ``-m fast``
does not import the modules whose ``pytestmark`` puts them above (``levels.skippable``), and
its fsyncs skip the disk (``skip_disk_syncs``). Fast tests get a per-test timeout of 15 s
(``FAST_TEST_TIMEOUT``) unless they set their own. It registers ``hutch_testing.modorder``: on a
pytest-xdist worker, the long modules come first.

Register with `pytest_plugins = ["hutch_testing.pytest_plugin"]` in tests/conftest.py.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Protocol, Unpack

import pytest
from hutch_demo import ports, processes

from hutch_testing import brokers, levels, modorder, serial
from hutch_testing import rabbitmq as reference


class HutchBrokerFactory(Protocol):
    """``hutch_broker_factory``: starts a HutchBroker with these keyword arguments."""

    def __call__(self, **kwargs: Unpack[brokers.HutchLaunchOptions]) -> brokers.HutchBroker: ...


_FALSE_VALUES = ("", "0", "false", "no")
# A fast test is in memory: the slowest measured take about a second on a loaded 2-core machine.
FAST_TEST_TIMEOUT = 15
_LEVEL_MARKERS = (
    "fast: level fast, set by hutch_testing.levels: pure and in memory, no process, no socket",
    "broker: level broker, set by hutch_testing.levels: processes and sockets on loopback",
    "node: level node, set by hutch_testing.levels: a Kubernetes plane",
)


def reference_required() -> bool:
    """True in CI and when HUTCH_REFERENCE_REQUIRED=1: the reference node may not be skipped."""
    in_ci = os.environ.get("CI", "").strip().lower() not in _FALSE_VALUES
    return in_ci or os.environ.get("HUTCH_REFERENCE_REQUIRED") == "1"


def _unavailable(reason: str) -> None:
    if reference_required():
        pytest.fail(
            f"the reference RabbitMQ {reference.EXPECTED_VERSION} is required here "
            f"(CI or HUTCH_REFERENCE_REQUIRED=1) but is unavailable: {reason}",
            pytrace=False,
        )
    pytest.skip(f"reference RabbitMQ unavailable: {reason.splitlines()[0]}")


def _start_reference(node: reference.RabbitMQ) -> str | None:
    """Start the node; return why it is unusable, or None."""
    try:
        node.start()
    except processes.BrokerStartError as error:
        return str(error)
    version = node.version()
    if version != reference.EXPECTED_VERSION:
        return f"it reports version {version}, not {reference.EXPECTED_VERSION}"
    return None


@pytest.fixture(scope="session")
@levels.broker_level
def rabbitmq() -> Iterator[reference.RabbitMQ]:
    """The session's RabbitMQ 3.10.8 node on loopback (guest/guest, management plugin enabled)."""
    node = reference.RabbitMQ()
    problem = _start_reference(node)
    if problem is not None:
        node.stop(keep_files=True)  # its logs, for a look after the run
        _unavailable(problem)
    yield node
    node.stop()


@pytest.fixture
@levels.broker_level
def hutch_broker_factory(tmp_path: Path) -> Iterator[HutchBrokerFactory]:
    """Start hutch-brokers (keyword arguments go to `HutchBroker`); all stop after the test."""
    started: list[brokers.HutchBroker] = []

    def start(**kwargs: Unpack[brokers.HutchLaunchOptions]) -> brokers.HutchBroker:
        index = len(started)
        kwargs.setdefault("data_dir", tmp_path / f"hutch-{index}" / "data")
        broker = brokers.HutchBroker(work_dir=tmp_path / f"hutch-{index}", **kwargs)
        started.append(broker)
        return broker.start()

    yield start
    for broker in reversed(started):
        broker.stop()


def pytest_configure(config: pytest.Config) -> None:
    for line in _LEVEL_MARKERS:
        config.addinivalue_line("markers", line)
    if (config.option.markexpr or "").strip() == levels.FAST:
        config.add_cleanup(skip_disk_syncs())
    config.addinivalue_line("markers", serial.MARKER_HELP)
    if not config.pluginmanager.has_plugin(modorder.NAME):  # -p no:hutch_testing.modorder blocks it
        config.pluginmanager.register(modorder, modorder.NAME)
    port_shard = worker_port_shard(os.environ)
    if port_shard is not None:
        os.environ[ports.SHARD_ENV] = port_shard


def synced_in_memory(fd: int) -> None:
    """``os.fsync`` and ``os.fdatasync`` in a ``-m fast`` run: the descriptor is checked, as
    the real calls check it (``EBADF``), and the disk is not waited for."""
    os.fstat(fd)


def skip_disk_syncs() -> Callable[[], None]:
    """Makes ``os.fsync`` and ``os.fdatasync`` :func:`synced_in_memory` until the returned
    function is called.

    Why: a sync only matters after a power cut or a kernel crash, which no test in this process
    can cause (a killed process loses nothing the kernel holds), so no fast test can tell. Yet
    the fast tests of tests/broker/store, tests/broker/admin and tests/semantics made 10,995,
    each waiting for the disk: 39 s of the threads' wall time at load 15 (2026-11-29). Done at
    configure, before any test module imports the store, whose modules keep a reference to
    ``os.fdatasync``. Processes that tests start sync for real.
    """
    saved = {name: getattr(os, name) for name in ("fsync", "fdatasync") if hasattr(os, name)}
    for name in saved:
        setattr(os, name, synced_in_memory)

    def restore() -> None:
        for name, original in saved.items():
            setattr(os, name, original)

    return restore


def worker_port_shard(environ: Mapping[str, str]) -> str | None:
    """On pytest-xdist worker k of n, the port shard "k/n" (``hutch_demo.ports``): the brokers
    two workers start at the same moment never pick the same port. None outside a worker, or
    when ``HUTCH_PORT_SHARD`` is already set."""
    worker = environ.get("PYTEST_XDIST_WORKER", "")
    count = environ.get("PYTEST_XDIST_WORKER_COUNT", "")
    if ports.SHARD_ENV in environ or not worker.startswith("gw") or not count.isdigit():
        return None
    return f"{int(worker[2:])}/{count}"


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """``-m fast`` leaves uncollected the modules whose ``pytestmark`` alone puts every test
    above the fast level (``levels.skippable``): their import and assert rewriting cost about
    2.4 s of CPU of the fast level's collection in a fresh clone. None: pytest's rules decide."""
    if levels.skippable(collection_path, config.option.markexpr or ""):
        return True
    return None


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Marks users of the reference node `rabbitmq` (so `-m "not rabbitmq"` works) and gives every
    test its level marker; tryfirst, because `-m` deselects in pytest's own hook."""
    timeouts = config.pluginmanager.hasplugin("timeout")
    _mark_serial(items)
    for item in items:
        if "rabbitmq" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.rabbitmq)
        level = item_level(item)
        lower = {mark.name for mark in item.iter_markers() if mark.name in levels.LEVELS} - {level}
        if lower:
            raise pytest.UsageError(
                f"{item.nodeid} is marked {', '.join(sorted(lower))} but its fixtures put it at "
                f"level {level}: drop the mark (a test is at one level, {levels.HELP})"
            )
        item.add_marker(getattr(pytest.mark, level))
        if level == levels.FAST and timeouts and not item.get_closest_marker("timeout"):
            item.add_marker(pytest.mark.timeout(FAST_TEST_TIMEOUT))


def _mark_serial(items: list[pytest.Item]) -> None:
    """Marks the tests of the modules ``hutch_testing.serial`` lists; a stale entry stops
    the run."""
    root = serial.REPO
    stale = serial.missing(root) if (root / "tests").is_dir() else []
    if stale:
        raise pytest.UsageError(
            f"hutch_testing.serial lists {', '.join(stale)}, which is not in the tree: "
            "update the list (docs/testing.md#how-the-broker-level-runs)"
        )
    for item in items:
        try:
            relpath = item.path.resolve().relative_to(root).as_posix()
        except ValueError:
            continue  # a test outside this tree (a pytest run in a temp dir): never serial
        if serial.is_serial(relpath):
            item.add_marker(serial.MARKER)


def item_level(item: pytest.Item) -> str:
    """The item's level from its markers and the levels its fixtures declare."""
    info = getattr(item, "_fixtureinfo", None)
    definitions = info.name2fixturedefs.values() if info is not None else ()
    declared = (levels.declared_level(fixture.func) for defs in definitions for fixture in defs)
    return levels.level_of((mark.name for mark in item.iter_markers()), declared)


def _guarded(item: pytest.Item, phase: str) -> Iterator[None]:
    """Runs one phase of a fast test under the guard; a blocked attempt fails it by name, even
    when the code under test caught the error."""
    if not item.get_closest_marker(levels.FAST):
        return (yield)
    guard = levels.Guard()
    with guard.active():
        try:
            result = yield
        except BaseException:
            if not guard.attempts:
                raise
            result = None  # the blocked attempt, or what the code under test made of it
    if guard.attempts:
        pytest.fail(
            f"{item.nodeid} is at level fast, but in its {phase} it {guard.attempts[0]}. "
            + levels.advice(),
            pytrace=False,
        )
    return result


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Iterator[None]:
    return (yield from _guarded(item, "setup"))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    return (yield from _guarded(item, "call"))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item) -> Iterator[None]:
    return (yield from _guarded(item, "teardown"))
