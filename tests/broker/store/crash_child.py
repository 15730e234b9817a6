"""Child process of test_crash.py: appends, acks and syncs until it is SIGKILLed.

Usage: python crash_child.py DATA_DIR SEED inline|threaded OUT_FILE

A line "C <msg_id> <seq>" or "A <msg_id>" is written to OUT_FILE only after a sync() that
began after the append or ack returned: exactly what the broker would confirm. "I <msg_id>" is
written just before an ack, so the parent knows which messages may legitimately be gone. All
lines go out with os.write, so nothing sits in a userspace buffer when the kill comes.
In threaded mode a worker thread syncs while the main thread keeps appending, as the server
does. Every message is derived from its seq, so the parent can check any recovered message.
"""

from __future__ import annotations

import os
import random
import sys
import threading
from pathlib import Path

from hutch_broker.store import MessageStore

SEGMENT_SIZE = 16 * 1024
MAX_LIVE = 300


def message(seq: int) -> dict[str, object]:
    rng = random.Random(seq)
    size = 40_000 if seq % 97 == 0 else rng.randrange(0, 3000)
    return {
        "enqueued_at_ms": seq,
        "expire_at_ms": seq * 2,
        "exchange": "ex",
        "routing_key": f"rk.{seq}",
        "raw_properties": seq.to_bytes(8, "little"),
        "body": seq.to_bytes(8, "little") + rng.randbytes(size),
    }


class Worker:
    def __init__(self, data_dir: Path, seed: int, out_path: Path) -> None:
        self.store = MessageStore(data_dir, segment_size=SEGMENT_SIZE)
        self.queue = self.store.open_queue("/", "crash")
        self.live = [stored.msg_id for stored in self.queue.recover()]
        self.rng = random.Random(seed)
        self.seq = seed * 1_000_000
        self.out = os.open(out_path, os.O_WRONLY | os.O_APPEND)
        self.lock = threading.Lock()
        self.done: list[str] = []  # operations that returned, not yet covered by a sync

    def step(self) -> None:
        self.seq += 1
        msg_id = self.queue.append(**message(self.seq))  # type: ignore[arg-type]
        self.live.append(msg_id)
        lines = [f"C {msg_id} {self.seq}\n"]
        while len(self.live) > MAX_LIVE or (self.live and self.rng.random() < 0.3):
            gone = self.live.pop(self.rng.randrange(len(self.live)))
            os.write(self.out, f"I {gone}\n".encode())
            self.queue.ack(gone)
            lines.append(f"A {gone}\n")
        with self.lock:
            self.done += lines

    def sync_and_confirm(self) -> None:
        with self.lock:
            covered, self.done = self.done, []
        self.store.sync()
        os.write(self.out, "".join(covered).encode())


def run_inline(worker: Worker) -> None:
    while True:
        for _ in range(worker.rng.randrange(1, 60)):
            worker.step()
        worker.sync_and_confirm()


def run_threaded(worker: Worker) -> None:
    def syncer() -> None:
        while True:
            worker.sync_and_confirm()

    threading.Thread(target=syncer, daemon=True).start()
    while True:
        worker.step()


def main() -> None:
    data_dir, seed, mode, out_path = sys.argv[1:]
    worker = Worker(Path(data_dir), int(seed), Path(out_path))
    (run_threaded if mode == "threaded" else run_inline)(worker)


if __name__ == "__main__":
    main()
