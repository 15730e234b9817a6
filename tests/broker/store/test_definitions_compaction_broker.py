"""Definitions compaction on a running broker: off the event loop, and safe against kill -9.

The structural test imports 5,000 queues and 5,000 bindings into an in-process broker (the
journal then passes 1 MB, so a compaction starts) and checks where the work ran: the model is
never exported in one call, the snapshot is encoded in a worker thread, and the loop turns many
times while the compaction runs. Before, one loop turn exported, encoded and wrote everything
(about 0.2 s for this size).

The crash test kills a real hutch-broker with SIGKILL while ``definitions.log.next`` exists
(the background compaction is running) and checks that every queue and binding whose
declare-ok or bind-ok the client received is there after the restart (compaction_kill.py; the
kills 15 and 40 ms later, which need no quiet machine, are test_definitions_compaction_kill.py).
"""

from __future__ import annotations

import asyncio
import gc
import threading
import time
from pathlib import Path

import pika
import pytest
from hutch_broker.admin import slicing
from hutch_broker.store import definitions, load_definitions
from hutch_demo.management import Management
from hutch_testing import definitions as documents
from hutch_testing import noisy
from hutch_testing.progress import Watch, wait_until

from tests.broker.store.compaction_kill import (
    kill_during_a_compaction_keeps_every_acknowledged_declare,
)

COUNT = 5000
LOOSE = noisy.CanaryBound(max_ms=250.0, p99_ms=250.0)
# The waits for a compaction fail when what they watch (export steps, declares acknowledged,
# the data directory's files) has not changed for this long, never on a total time: a loaded
# machine stretches every step (docs/testing.md, flaky tests). Below the broker level's 60 s
# pytest timeout, the outer guard, which would otherwise end a stalled test with a stack only.
STALL_S = 20.0


def files(directory: Path) -> tuple[tuple[str, int, int], ...]:
    """The data directory's files (name, size, inode): a compaction's steps show here."""
    found = []
    for path in sorted(directory.iterdir()):
        try:
            stat = path.stat()
        except FileNotFoundError:  # renamed or removed since the listing
            continue
        found.append((path.name, stat.st_size, stat.st_ino))
    return tuple(found)


def document(count: int) -> dict:
    """``count`` queues, each bound to amq.direct (the vhost's own items, for ``POST
    /api/definitions/<vhost>``)."""
    names = [f"q{index:05d}" for index in range(count)]
    edges = [("amq.direct", name, f"k{index}") for index, name in enumerate(names)]
    return documents.document([], names, edges)


async def test_compaction_runs_in_slices_and_encodes_off_the_loop(server, monkeypatch, request):
    loop_thread = threading.get_ident()
    encoded_on: list[int] = []
    one_call_exports: list[int] = []
    real_bytes = definitions._snapshot_bytes
    real_export = server.broker.export_definitions

    def recording_bytes(document):
        encoded_on.append(threading.get_ident())
        return real_bytes(document)

    def recording_export(**kwargs):
        one_call_exports.append(threading.get_ident())
        return real_export(**kwargs)

    steps_taken = [0]
    real_steps = server.broker.export_steps

    def counting_steps(**kwargs):
        steps = real_steps(**kwargs)
        while True:  # the export's items, each a sign that the compaction gets on
            try:
                step = next(steps)
            except StopIteration as done:
                return done.value
            steps_taken[0] += 1
            yield step

    monkeypatch.setattr(definitions, "_snapshot_bytes", recording_bytes)
    monkeypatch.setattr(server.broker, "export_definitions", recording_export)
    monkeypatch.setattr(server.broker, "export_steps", counting_steps)
    snapshot = server.definitions.snapshot_path
    before = snapshot.stat().st_ino
    # The broker runs in the test process, whose heap holds everything the whole suite's
    # collection imported (the Kubernetes client's models, pyspark, ...): a full collection of
    # it paused a loop turn for 433-451 ms in CI runs. Frozen, the collector walks what the
    # broker allocates from here on, as in a broker process of its own.
    gc.collect()
    gc.freeze()
    request.addfinalizer(gc.unfreeze)

    # Journals 10,000 records: over 1 MB.
    server.broker.import_definitions(documents.in_vhost(document(COUNT), "/"))
    turns = 0
    longest = 0.0
    # Steps per turn of this loop: between two of this test's turns the compaction's task runs
    # one slice (slicing.run_steps: at most SLICE_STEPS steps, or 2 ms). Counted, not timed:
    # how many turns the walk takes depends on how fast a step runs, which a loaded machine or
    # a quick moment changes (a count of all turns, >= 20, once saw 12).
    walk_turns, most_in_a_turn, seen = 0, 0, 0
    watch = Watch(
        "the compaction",
        "export steps, snapshots encoded, the data directory's files",
        lambda: (steps_taken[0], len(encoded_on), files(snapshot.parent)),
        STALL_S,
    )
    # Until the compaction has finished: the new snapshot swapped in, then (in the same worker
    # thread, a directory fsync later) ``.next`` renamed over the journal. Checking ``.next``
    # as soon as the snapshot changed raced that second rename on a loaded machine.
    while snapshot.stat().st_ino == before or server.definitions.next_journal_path.exists():
        watch.check()
        started = time.perf_counter()
        await asyncio.sleep(0)
        longest = max(longest, time.perf_counter() - started)
        turns += 1
        advanced, seen = steps_taken[0] - seen, steps_taken[0]
        walk_turns += advanced > 0
        most_in_a_turn = max(most_in_a_turn, advanced)

    assert one_call_exports == []  # before: export_definitions() in the loop's turn
    assert encoded_on, "the snapshot was not rewritten"
    assert loop_thread not in encoded_on  # before: json.dumps(indent=2) on the loop
    # The model walk is 10,000 items, 50 a step: more steps than one slice may take, so a walk
    # in one piece (the export in one turn) fails here whatever the machine's speed.
    assert steps_taken[0] > slicing.SLICE_STEPS
    assert most_in_a_turn <= slicing.SLICE_STEPS, f"{most_in_a_turn} export steps in one turn"
    assert walk_turns >= 2, f"the export walked in {walk_turns} turn(s)"
    saved = load_definitions(snapshot)
    assert len(saved["queues"]) == COUNT
    assert len(saved["bindings"]) == COUNT
    assert not server.definitions.next_journal_path.exists()
    assert longest < 0.25, f"a loop turn of {longest * 1000:.0f} ms in {turns} turns"


def test_kill_9_during_a_background_compaction_keeps_every_acknowledged_declare(hutch_broker):
    """Killed as soon as ``definitions.log.next`` shows (the kill must land in the compaction,
    a race with the broker's progress: serial); 15 and 40 ms later, wherever it lands, in
    test_definitions_compaction_kill.py (parallel pass)."""
    assert kill_during_a_compaction_keeps_every_acknowledged_declare(hutch_broker, 0)


@pytest.mark.timeout(300)
def test_a_compaction_of_5000_queues_and_bindings_does_not_stall_a_canary(hutch_broker):
    """5,000 queues and 5,000 bindings imported, then AMQP declares in another vhost until the
    journal outgrows the snapshot: the compaction rewrites all of it while a canary runs.
    Before, that compaction held the loop for about 0.2 s (more on a busy machine)."""
    noisy.create_tenant(hutch_broker, "big", tags="administrator")
    declarer = noisy.create_tenant(hutch_broker, "declarer")
    canary_tenant = noisy.create_tenant(hutch_broker, "canary")
    admin = Management(hutch_broker, timeout=180.0)
    assert admin.post("/definitions/big", document(COUNT)).status == 204
    snapshot = hutch_broker.data_dir / "definitions.json"
    next_journal = hutch_broker.data_dir / "definitions.log.next"
    watch = Watch(
        "the import's compaction",
        "the data directory's files",
        lambda: files(snapshot.parent),
        STALL_S,
    )
    wait_until(lambda: not next_journal.exists(), watch, poll_s=0.05)
    first = snapshot.stat().st_ino

    connection = pika.BlockingConnection(pika.URLParameters(declarer.amqp_url(hutch_broker)))
    channel = connection.channel()
    compactions = 0
    with noisy.Canary(hutch_broker, canary_tenant) as canary:
        time.sleep(0.5)
        index = 0
        while compactions < 1 or index % 500:
            name = f"d{index:06d}"
            channel.queue_declare(name, durable=True)
            channel.queue_bind(name, "amq.direct", name, arguments={"pad": "p" * 800})
            index += 1
            if snapshot.stat().st_ino != first:
                first = snapshot.stat().st_ino
                compactions += 1
            assert index < 20_000, "no compaction"
        time.sleep(0.5)
        report = canary.stop()
    connection.close()
    saved = load_definitions(snapshot)
    assert sum(item["vhost"] == "big" for item in saved["queues"]) == COUNT
    assert sum(item["vhost"] == "big" for item in saved["bindings"]) == COUNT
    assert report.violations(LOOSE) == [], report.summary()


async def test_a_clean_stop_during_a_background_compaction_keeps_everything(server):
    server.broker.import_definitions(documents.in_vhost(document(COUNT), "/"))
    data = server.config.data_dir
    watch = Watch("a compaction", "the data directory's files", lambda: files(data), STALL_S)
    while not server.definitions.compacting:
        watch.check()
        await asyncio.sleep(0)
    for _ in range(5):  # a few slices of the export
        await asyncio.sleep(0)
    await server.stop()
    await asyncio.sleep(0.5)  # a thread still running finds itself cancelled
    assert not (data / "definitions.log.next").exists()
    assert sorted(p.name for p in data.glob(".definitions*")) == []
    saved = load_definitions(data / "definitions.json")
    assert len(saved["queues"]) == COUNT
    assert len(saved["bindings"]) == COUNT
