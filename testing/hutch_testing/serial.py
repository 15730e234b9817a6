"""The broker-level modules that run alone, after the parallel pass (marker ``serial``).

Why: scripts/test.sh runs the broker level on two pytest-xdist workers, a module per worker at a
time (``--dist loadfile``), so each module still has its shared brokers to itself. A module whose
verdict is a measurement of the machine would then measure the other worker as well: a canary's
round trip or a loop turn against a bound, CPU time or a rate against the clock, a crash that must
land at a point of the child's progress, a process's memory against a watermark. Those modules
run in a second pass with one pytest process, as the whole level ran before, and are listed here,
in one place, rather than marked in each module: ``hutch_testing.pytest_plugin`` marks their tests
``serial`` at collection, and an entry that names no file of the tree stops the run (a renamed
module would otherwise slip into the parallel pass unnoticed).

An entry is a path relative to the repository's root: a module, or a folder ending in "/"
(every module under it).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

# The tree the entries are relative to (hutch-testing is installed editable from testing/).
REPO = Path(__file__).resolve().parents[2]
MARKER = "serial"
MARKER_HELP = (
    "serial: set by hutch_testing.serial: a timing-sensitive module, run alone after the "
    "broker level's parallel pass (docs/testing.md#how-the-broker-level-runs)"
)

SERIAL: tuple[str, ...] = (
    # The noisy-neighbour suite: a canary's round trips against bounds, while a tenant floods.
    "tests/noisy/",
    # Canaries timed during another tenant's or connection's work.
    "tests/broker/admin/test_definitions_isolation.py",
    "tests/broker/admin/test_listing_isolation.py",
    "tests/broker/admin/test_listing_stall.py",
    "tests/broker/admin/test_policy_isolation.py",
    "tests/broker/amqp/test_declare_isolation.py",
    "tests/broker/amqp/test_matching_cost.py",
    "tests/broker/amqp/test_routing_isolation.py",
    "tests/sidebyside/test_matching_cost.py",
    # The fuzzers: a canary's stall bound, the broker's memory after the fuzzing.
    "tests/broker/fuzz/",
    # CPU time of the broker process against the work done.
    "tests/broker/admin/test_paged_listing.py",
    "tests/bench/test_proccpu_process.py",
    "tests/bench/test_broker_size.py",
    # A publish rate against the clock; a loop turn against a bound during compaction.
    "tests/broker/amqp/test_stuck_consumer.py",
    "tests/broker/store/test_definitions_compaction_broker.py",
    # Crashes at points of a child's progress, in cycles.
    "tests/broker/store/test_crash.py",
    "tests/broker/torture/test_crash_cycles.py",
    # A process's memory against a watermark or a bound.
    "tests/broker/admin/test_queue_memory.py",
    "tests/broker/amqp/test_delivery_memory.py",
    "tests/broker/amqp/test_paging.py",
    "tests/broker/server/test_lost_connection_memory.py",
    "tests/broker/store/test_recovered_bodies.py",
    "tests/broker/store/test_recovery_memory.py",
    "tests/semantics/test_memory_alarm.py",
    "tests/sidebyside/test_queue_memory.py",
    # The Web UI's page loads against a wall-clock bound.
    "tests/ui/test_paging.py",
)


def is_serial(relpath: str, entries: Iterable[str] = SERIAL) -> bool:
    """True when the module at ``relpath`` (relative, "/"-separated) is listed (pure)."""
    return any(
        relpath.startswith(entry) if entry.endswith("/") else relpath == entry for entry in entries
    )


def missing(root: Path, entries: Iterable[str] = SERIAL) -> list[str]:
    """The entries that name no module or folder under ``root``."""
    return [entry for entry in entries if not _exists(root / entry, folder=entry.endswith("/"))]


def _exists(path: Path, *, folder: bool) -> bool:
    return path.is_dir() if folder else path.is_file()
