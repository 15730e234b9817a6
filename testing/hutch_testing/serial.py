"""The broker-level modules that run alone, after the parallel pass (marker ``serial``).

Why: scripts/test.sh runs the broker level on two pytest-xdist workers, a module per worker at a
time (``--dist loadfile``), so each module still has its shared brokers to itself. A module whose
verdict is a measurement of the machine would then measure the other worker as well: a canary's
round trip or a loop turn against a bound, CPU time or a rate against the clock, a crash that must
land at a point of the child's progress, memory with a clock in the verdict. Those modules
run in a second pass with one pytest process, as the whole level ran before, and are listed here,
in one place, rather than marked in each module: ``hutch_testing.pytest_plugin`` marks their tests
``serial`` at collection, and an entry that names no file of the tree stops the run (a renamed
module would otherwise slip into the parallel pass unnoticed).

An entry is a path relative to the repository's root: a module, or a folder ending in "/"
(every module under it).

The list is checked against the code (``tests/levels/test_serial.py``): a module with a marker
of a measurement (``hutch_testing.measures``: a canary, CPU time, resident memory, a clock
difference asserted against a bound) is listed here or in ``NOT_SERIAL`` with the reason a
neighbour cannot move its verdict; a listed module without one is in ``UNSEEN``, which says
what it measures that the scan cannot see. Memory alone is not a reason: it is per process, and
a module whose broker runs in a process of its own (or whose count is tracemalloc's, in the test's
own process) gets the same figure beside another worker.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
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
    # Canaries timed during another tenant's or connection's work. Their tests that measure
    # nothing run in the parallel pass: the import's refusal and its race with deletes
    # (test_definitions_consistency.py), the expensive policy's deletion
    # (test_policy_deletion.py), the refused patterns (tests/broker/amqp/test_matching_patterns.py).
    "tests/broker/admin/test_definitions_isolation.py",
    "tests/broker/admin/test_listing_isolation.py",
    "tests/broker/admin/test_listing_stall.py",
    "tests/broker/admin/test_policy_isolation.py",
    "tests/broker/amqp/test_declare_isolation.py",
    "tests/broker/amqp/test_matching_cost.py",
    "tests/broker/amqp/test_routing_isolation.py",
    # The frame fuzzer: a canary's stall bound.
    "tests/broker/fuzz/test_frames.py",
    # CPU time of the broker process against the work done.
    "tests/broker/admin/test_paged_listing_broker.py",
    "tests/bench/test_proccpu_process.py",
    "tests/bench/test_broker_size.py",
    # A publish rate against the clock; a loop turn against a bound during compaction, and a
    # kill -9 that must land in one (the kills 15 and 40 ms later, wherever they land, are
    # test_definitions_compaction_kill.py, in the parallel pass); the management stats' delay
    # against hutch-broker's 1 s (the one test of test_policies_and_management.py that
    # measured: its other 38 run in the parallel pass).
    "tests/broker/amqp/test_stuck_consumer.py",
    "tests/broker/store/test_definitions_compaction_broker.py",
    "tests/sidebyside/test_management_stats.py",
    # Crashes at points of a child's progress, in cycles.
    "tests/broker/store/test_crash.py",
    "tests/broker/torture/test_crash_cycles.py",
    # Memory with a clock in the verdict: another tenant's publishes within 5 s (what a delivery
    # budget lets through and bodies read back whole, no clock, are test_delivery_budget.py, in
    # the parallel pass); RSS back within 12 s of idle; a 4 s TTL that must outlast a restart;
    # RabbitMQ's idle queue heap.
    "tests/broker/amqp/test_delivery_memory.py",
    "tests/broker/fuzz/test_memory_after.py",
    "tests/broker/store/test_recovered_bodies.py",
    "tests/sidebyside/test_queue_memory.py",
    # The Web UI's page loads against a wall-clock bound.
    "tests/ui/test_paging.py",
)

# Listed modules whose measurement ``hutch_testing.measures`` cannot see, and what it is.
UNSEEN: dict[str, str] = {
    "tests/broker/admin/test_listing_stall.py": "a 0.5 s send stall raced against a 2 s sleep",
    "tests/broker/store/test_crash.py": "kill -9 at points of a child's progress",
    "tests/broker/torture/test_crash_cycles.py": "kills at points of the publishers' progress",
    "tests/broker/store/test_recovered_bodies.py": "a 4 s message TTL that must outlast a restart",
    "tests/sidebyside/test_queue_memory.py": (
        "RabbitMQ's idle queue heap, larger while its garbage collector lags behind the load"
    ),
}

_NODE_LEVEL = (
    "the node level, after the broker level: beside it at most the level's other pytest process "
    "(the control-plane tests beside the real node's, scripts/test.sh), and its bounds are a "
    "mechanism's, with room: a finalizer in 20 s, a REFUSED reply in 0.5 s, a reconnect in 47 s, "
    "a roll in 90 s, restarts in a third of the startup probe's budget"
)

# Modules with a marker of a measurement that run in the parallel pass or at another level, and
# why they may: no neighbour moves their verdict (a slower machine only loosens an allowance).
# An entry whose module no longer has a marker is stale and named by the check (``unneeded``):
# the upper time bounds that were here (a heartbeat's drop, a page's refresh, a cancelled read)
# became checks of which mechanism acted (docs/testing.md#how-the-broker-level-runs).
NOT_SERIAL: dict[str, str] = {
    "tests/spark/test_streamdriver.py": (
        "the clock is an allowance: at most one request per idle interval of the time measured"
    ),
    "tests/levels/test_measures.py": "pure: the markers' own tests, whose sources are strings",
    "tests/spark/test_streamtimes.py": (
        "the clock is an allowance: one wait of 1 s against the five a wait per stream takes,"
        " with 2 s of room for the set-up"
    ),
    "tests/operator/test_hutch_topology.py": _NODE_LEVEL,
    "tests/broker/amqp/test_paging.py": (
        "the peak RSS of a broker of its own, which samples its memory by the bytes it is sent"
    ),
    "tests/broker/store/test_recovery_memory.py": (
        "the peak RSS of a broker of its own while it recovers and drains; no clock in the verdict"
    ),
    "tests/bench/test_stream_pods_bench.py": "pure: the benchmark's CPU arithmetic on samples",
    "tests/bench/test_stallprobe.py": (
        "the thread's own CPU time, which a neighbour cannot take: the burn loops until it has used"
        " what the verdict counts"
    ),
    "tests/bench/test_stallprobe_broker.py": (
        "the clock only bounds a window from above: the broker's window opens after the test's"
        " reading, whatever the load"
    ),
    "tests/broker/server/test_vhost_workers.py": (
        "the canary's verdict is served or not, and the liveness bound (1.5 s) is hundreds of the"
        " busy worker's loop turns; a listener that is itself starved restarts the question's clock"
    ),
    "tests/localkube/test_dns.py": _NODE_LEVEL,
    "tests/localkube/test_spark_node.py": _NODE_LEVEL,
    "tests/operator/test_broker_crashloop_node.py": _NODE_LEVEL,
    "tests/operator/test_broker_memory_node.py": _NODE_LEVEL,
}


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


def modules(root: Path, entries: Iterable[str] = SERIAL) -> list[str]:
    """Every test module the entries take, relative to ``root``."""
    found = sorted(
        path.relative_to(root).as_posix() for path in (root / "tests").rglob("test_*.py")
    )
    return [relpath for relpath in found if is_serial(relpath, entries)]


def unlisted(
    marked: Mapping[str, Iterable[str]],
    entries: Iterable[str] = SERIAL,
    exempt: Mapping[str, str] = NOT_SERIAL,
) -> dict[str, list[str]]:
    """The modules with a marker (``hutch_testing.measures.scan``) that neither the entries
    take nor ``exempt`` names, each with its markers."""
    entries = tuple(entries)
    return {
        relpath: sorted(marks)
        for relpath, marks in marked.items()
        if not is_serial(relpath, entries) and relpath not in exempt
    }


def unneeded(
    marked: Mapping[str, Iterable[str]], exempt: Mapping[str, str] = NOT_SERIAL
) -> list[str]:
    """The exemptions whose module has no marker any more: nothing left to exempt."""
    return [relpath for relpath in exempt if relpath not in marked]


def unmarked(
    listed: Iterable[str], marked: Mapping[str, Iterable[str]], unseen: Mapping[str, str] = UNSEEN
) -> list[str]:
    """The listed modules without a marker that ``unseen`` does not account for."""
    return [relpath for relpath in listed if relpath not in marked and relpath not in unseen]
