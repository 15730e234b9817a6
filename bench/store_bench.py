"""Micro-benchmark of the durable message store (IMPL-6): append, group commit, recovery.

    PYTHONPATH=broker python bench/store_bench.py [--messages 100000] [--body 1024] [--dir /tmp]

Figures, all for ``--body``-byte records in one queue log with 8 MiB segments:
- append cost alone (CPU time per append, nothing synced until the end);
- appends/s with a ``sync()`` every 100 appends on the same thread (fsync-bound);
- appends/s with the event-loop model: appends on the main thread while a worker thread runs
  ``MessageStore.sync()`` back to back (each message counts once its sync returned);
- recovery time of ``--messages`` messages (reopen + ``recover()``).
Run it on the disk that will hold ``--data-dir``: fsync latency is most of the answer.

    PYTHONPATH=broker python bench/store_bench.py --ack-scan [--messages 100000] [--rounds 7]

reads an ack file's worth of ``--messages`` ack records with ``records.scan_acks`` alone (the
part of recovery that grows with every ack a log ever took): CPU µs per record, the median and
range of ``--rounds`` rounds, no disk involved.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import threading
import time
from pathlib import Path

from hutch_broker.store import MessageStore, QueueStore, records


def append_some(queue: QueueStore, count: int, body: bytes) -> None:
    for index in range(count):
        queue.append(
            enqueued_at_ms=1_700_000_000_000 + index,
            expire_at_ms=0,
            exchange="amq.direct",
            routing_key="bench.key",
            raw_properties=b"\x90\x00\x0atext/plain\x02",
            body=body,
        )


def append_cost(root: Path, count: int, body: bytes) -> float:
    """Microseconds of CPU per append, buffers only."""
    store = MessageStore(root / "cost")
    queue = store.open_queue("/", "bench")
    started = time.process_time()
    append_some(queue, count, body)
    elapsed = time.process_time() - started
    store.close()
    return elapsed / count * 1e6


def synced_every_100(root: Path, count: int, body: bytes) -> float:
    """Appends per second, one thread, sync() after every 100."""
    store = MessageStore(root / "inline")
    queue = store.open_queue("/", "bench")
    started = time.perf_counter()
    for _ in range(count // 100):
        append_some(queue, 100, body)
        store.sync()
    elapsed = time.perf_counter() - started
    store.close()
    return count // 100 * 100 / elapsed


def synced_by_worker(root: Path, count: int, body: bytes) -> tuple[float, int]:
    """Confirmed appends per second with a worker thread syncing back to back; sync count."""
    store = MessageStore(root / "threaded")
    queue = store.open_queue("/", "bench")
    done = threading.Event()
    syncs = 0

    def syncer() -> None:
        nonlocal syncs
        while not done.is_set():
            store.sync()
            syncs += 1

    worker = threading.Thread(target=syncer)
    started = time.perf_counter()
    worker.start()
    append_some(queue, count, body)
    done.set()
    worker.join()
    store.sync()  # the last appends are confirmed by this one
    elapsed = time.perf_counter() - started
    store.close()
    return count / elapsed, syncs


def recovery_time(root: Path, count: int, body: bytes) -> tuple[float, int]:
    directory = root / "recovery"
    store = MessageStore(directory)
    append_some(store.open_queue("/", "bench"), count, body)
    store.close()
    started = time.perf_counter()
    store = MessageStore(directory)
    recovered = store.open_queue("/", "bench").recover()
    elapsed = time.perf_counter() - started
    store.close()
    return elapsed, len(recovered)


def ack_scan_cost(count: int, rounds: int) -> list[float]:
    """CPU µs per ack record of ``scan_acks`` over ``count`` valid records, once per round."""
    data = b"".join(records.encode_ack(index * 1100 + 42) for index in range(count))
    costs = []
    for _ in range(rounds):
        started = time.process_time()
        found = records.scan_acks(data)
        costs.append((time.process_time() - started) / count * 1e6)
        assert len(found.offsets) == count
    return costs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--body", type=int, default=1024)
    parser.add_argument("--dir", type=Path, default=None, help="where to write (default: /tmp)")
    parser.add_argument("--ack-scan", action="store_true", help="only the ack scan's cost")
    parser.add_argument("--rounds", type=int, default=7, help="--ack-scan rounds (7)")
    args = parser.parse_args()
    if args.ack_scan:
        costs = ack_scan_cost(args.messages, args.rounds)
        print(
            f"ack scan: {statistics.median(costs):.3f} us CPU per record "
            f"({min(costs):.3f}-{max(costs):.3f}, {args.rounds} rounds of {args.messages:,})"
        )
        return
    body = bytes(range(256)) * (args.body // 256) + bytes(args.body % 256)
    root = Path(tempfile.mkdtemp(prefix="hutch-store-bench-", dir=args.dir))
    try:
        cost = append_cost(root, args.messages, body)
        print(f"append alone:            {cost:6.2f} us CPU per append ({1e6 / cost:,.0f}/s)")
        rate = synced_every_100(root, min(args.messages, 50_000), body)
        print(f"sync every 100 appends:  {rate:,.0f} appends/s")
        rate, syncs = synced_by_worker(root, args.messages, body)
        per_sync = args.messages / max(syncs, 1)
        print(
            f"worker-thread sync:      {rate:,.0f} appends/s ({syncs} syncs, {per_sync:.0f}/sync)"
        )
        elapsed, found = recovery_time(root, args.messages, body)
        print(f"recovery of {found:,} msgs: {elapsed:.2f} s ({found / elapsed:,.0f} msgs/s)")
    finally:
        shutil.rmtree(root)


if __name__ == "__main__":
    main()
