"""kill -9 of a real hutch-broker during a background definitions compaction, and the check that
every queue and binding whose declare-ok or bind-ok the client received is there after the
restart: shared by the case that must land the kill in the compaction at once (in
test_definitions_compaction_broker.py, a serial module: landing it is a race with the child's
progress) and the cases that kill 15 and 40 ms later, wherever the compaction then is, which
measure nothing (test_definitions_compaction_kill.py, in the broker level's parallel pass).
"""

from __future__ import annotations

import random
import signal
import threading
import time

import pika
from hutch_demo.management import Management
from hutch_testing.clients import connect
from hutch_testing.progress import Watch, wait_until

# As the compaction module's STALL_S: the wait for a compaction to start fails when no declare
# or bind was acknowledged for this long, never on a total time (docs/testing.md, flaky tests).
STALL_S = 20.0


def declare_until_killed(broker, acked: list[tuple[str, str]], stop: threading.Event, pad: str):
    """Durable queues, each bound to amq.direct with a padded binding (fewer declares per MB)."""
    try:
        channel = connect(broker).channel()
        index = 0
        while not stop.is_set():
            name = f"c{index:06d}"
            channel.queue_declare(name, durable=True)
            acked.append(("queue", name))
            channel.queue_bind(name, "amq.direct", name, arguments={"pad": pad})
            acked.append(("binding", name))
            index += 1
    except (pika.exceptions.AMQPError, OSError):
        pass  # the broker was killed


def kill_during_a_compaction_keeps_every_acknowledged_declare(broker, delay_ms: int) -> bool:
    """Declares until ``definitions.log.next`` exists (a background compaction runs), kills the
    broker ``delay_ms`` (±50%) later, restarts it and asserts that nothing acknowledged is lost
    and the start-up compaction cleaned up. True when the kill landed in the compaction."""
    next_journal = broker.data_dir / "definitions.log.next"
    acked: list[tuple[str, str]] = []
    stop = threading.Event()
    worker = threading.Thread(
        target=declare_until_killed, args=(broker, acked, stop, "p" * 800), daemon=True
    )
    worker.start()

    def declaring() -> None:
        assert worker.is_alive()

    watch = Watch(
        "a background compaction", "declares and binds acknowledged", acked.__len__, STALL_S
    )
    wait_until(next_journal.exists, watch, also=declaring, poll_s=0.001)
    time.sleep(delay_ms / 1000 * random.uniform(0.5, 1.5))
    mid_compaction = next_journal.exists()
    broker.kill(signal.SIGKILL)
    stop.set()
    worker.join(30)
    confirmed = list(acked)
    killed_during = mid_compaction and next_journal.exists()

    broker.start()
    exported = Management(broker).get("/definitions").body
    queues = {q["name"] for q in exported["queues"]}
    bindings = {
        b["destination"]
        for b in exported["bindings"]
        if b["source"] == "amq.direct" and b["arguments"].get("pad")
    }
    lost = [
        (kind, name)
        for kind, name in confirmed
        if name not in (queues if kind == "queue" else bindings)
    ]
    assert len(confirmed) > 1000
    assert lost == []
    assert not next_journal.exists()  # the start-up compaction cleaned up
    return killed_during
