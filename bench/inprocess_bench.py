"""The broker's dispatch path in one process, no sockets: CPU per message of three hot paths.

    PYTHONPATH=broker python bench/inprocess_bench.py [--rounds 3] [--messages 100000]

Why: ``bench/run.py`` measures whole brokers over sockets beside RabbitMQ, where a change of a
tenth of the broker's CPU hides in the load generator's and the kernel's share; and
``protocol_bench`` covers the frame codec alone. This drives a real ``Session`` over a real
``Broker`` (the dispatch, model and store layers, the protocol core) with bytes a client would
send, and reads what it would write, so every Python layer a message crosses is counted and
nothing else. Three paths, each in process CPU time per message (``time.process_time``):

* ``one-flow``: scenario 1's path, 1 KiB transient messages published on channel 1 in reads of
  200 (one 64 KiB-ish read each) to a queue whose consumer on channel 2 (prefetch 1000) takes
  them at once, the output taken after each read and the read acked with one multiple ack;
* ``queued``: the same messages, but the consumer is always a read behind (its prefetch of
  1000 full when a read arrives, so every publish is queued, and the read's 200 go out when
  its ack of 200 older ones drains the queue): the way scenario 1 runs over sockets, where the
  broker is the bottleneck and the consumer's output slice or prefetch is full whenever a
  publish arrives, so nearly every delivery is made by ``Queue.drain``
  (docs/bench/profile.md);
* ``stream``: a stream consumer reading a stream of 200 B messages from ``first`` with
  prefetch 2000, as the Spark executors' reader does, an ack for all it has after each pass of
  the loop's parked turns; the stream is filled and made durable before the clock runs.

Its use: measuring a change to the hot path before and after, or another build of the same
tree (``PYTHONPATH`` pointing at a tree whose modules were compiled, say); it prints which
``hutch_broker`` it measured and which of its modules are extension modules. The paths are
what the broker runs, but the loop's own costs (the turn's socket writes, epoll, the kernel)
are not here: a figure is a floor of the broker's CPU per message over sockets, not that.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import hutch_broker
from hutch_testing.storesession import StoreSession
from pamqp import body, commands, frame, header

READ = 200  # publishes per read of the one-flow path
ONE_FLOW_BODY = b"x" * 1024
STREAM_BODY = b"x" * 200
STREAM_PREFETCH = 2000


def opened(data_dir: Path | None) -> StoreSession:
    """An open connection with channels 1 and 2 on a broker of its own, its output taken."""
    client = StoreSession(data_dir)
    client.output()
    return client


def publishes(routing_key: str, payload: bytes, count: int, properties: object) -> bytes:
    one = (
        frame.marshal(commands.Basic.Publish(exchange="", routing_key=routing_key), 1)
        + frame.marshal(header.ContentHeader(0, len(payload), properties), 1)
        + frame.marshal(body.ContentBody(payload), 1)
    )
    return one * count


def one_flow_client() -> tuple[StoreSession, bytes]:
    """Queue "q" with a consumer on channel 2 (prefetch 1000), and a read of READ publishes."""
    client = opened(None)
    client.send(commands.Queue.Declare(queue="q"), 1)
    client.send(commands.Basic.Qos(prefetch_count=1000), 2)
    client.send(commands.Basic.Consume(queue="q", consumer_tag="c"), 2)
    return client, publishes("q", ONE_FLOW_BODY, READ, commands.Basic.Properties(delivery_mode=1))


def one_flow(messages: int) -> float:
    """µs of CPU per message published, delivered and acked."""
    client, read = one_flow_client()
    client.session.handle_data(read)  # warm: first-use paths
    client.output()
    channel = client.session.channels[2]
    client.send(commands.Basic.Ack(delivery_tag=channel.next_delivery_tag - 1, multiple=True), 2)
    reads = max(1, messages // READ)
    started = time.process_time()
    for _ in range(reads):
        client.session.handle_data(read)
        client.output()
        last = channel.next_delivery_tag - 1
        client.send(commands.Basic.Ack(delivery_tag=last, multiple=True), 2)
    spent = time.process_time() - started
    if channel.unacked or channel.next_delivery_tag - 1 != (reads + 1) * READ:
        raise RuntimeError("the one-flow path did not deliver and settle every message")
    return spent / (reads * READ) * 1e6


def queued(messages: int) -> float:
    """µs of CPU per message published behind a full consumer, delivered by a drain, acked."""
    client, read = one_flow_client()
    for _ in range(1000 // READ + 1):  # prefetch full, one read queued; warms first-use paths
        client.session.handle_data(read)
        client.output()
    channel = client.session.channels[2]
    queue = client.session.vhost.queues["q"]  # type: ignore[union-attr]
    acked = 0
    reads = max(1, messages // READ)
    started = time.process_time()
    for _ in range(reads):
        client.session.handle_data(read)
        client.output()
        acked += READ
        client.send(commands.Basic.Ack(delivery_tag=acked, multiple=True), 2)
    spent = time.process_time() - started
    if queue.ready_count != READ or len(channel.unacked) != 1000:
        raise RuntimeError("the queued path did not keep its consumer full and a read queued")
    return spent / (reads * READ) * 1e6


def stream(messages: int, data_dir: Path) -> float:
    """µs of CPU per stream message delivered and acked (the fill is not timed)."""
    client = opened(data_dir)
    arguments = {"x-queue-type": "stream"}
    client.send(commands.Queue.Declare(queue="s", durable=True, arguments=arguments), 1)
    read = publishes("s", STREAM_BODY, 1000, commands.Basic.Properties(delivery_mode=2))
    for _ in range(max(1, messages // 1000)):
        client.session.handle_data(read)
        client.output()
    total = max(1, messages // 1000) * 1000
    client.make_durable()  # the group commit: sync, then the stream may deliver
    client.output()
    channel = client.session.channels[2]
    started = time.process_time()
    client.send(commands.Basic.Qos(prefetch_count=STREAM_PREFETCH), 2)
    offset = {"x-stream-offset": "first"}
    client.send(commands.Basic.Consume(queue="s", consumer_tag="c", arguments=offset), 2)
    acked = 0
    while True:
        client.turns()
        client.output()
        last = channel.next_delivery_tag - 1
        if last >= total or last == acked:  # all, or a pass that delivered nothing
            break
        client.send(commands.Basic.Ack(delivery_tag=last, multiple=True), 2)
        acked = last
    spent = time.process_time() - started
    if last != total:
        raise RuntimeError(f"the stream delivered {last} of {total} messages")
    return spent / total * 1e6


def compiled_modules() -> list[str]:
    """The ``hutch_broker`` modules loaded from extension modules, not from source."""
    return sorted(
        name
        for name, module in sys.modules.items()
        if name.startswith("hutch_broker.")
        and str(getattr(module, "__file__", "") or "").endswith((".so", ".pyd"))
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--messages", type=int, default=100_000)
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.messages < 1000:
        parser.error("--rounds must be 1 or more and --messages 1000 or more")
    figures: dict[str, list[float]] = {"one-flow": [], "queued": [], "stream": []}
    for _ in range(args.rounds):
        figures["one-flow"].append(one_flow(args.messages))
        figures["queued"].append(queued(args.messages))
        with tempfile.TemporaryDirectory(prefix="hutch-inprocess-") as scratch:
            figures["stream"].append(stream(args.messages, Path(scratch) / "data"))
    print(f"hutch_broker: {Path(hutch_broker.__file__).parent}")
    compiled = compiled_modules()
    print(f"extension modules: {len(compiled)}" + (f" ({', '.join(compiled)})" if compiled else ""))
    for path, values in figures.items():
        print(
            f"{path:9} {statistics.median(values):6.2f} µs/message CPU "
            f"({min(values):.2f}-{max(values):.2f}, {len(values)} rounds of {args.messages:,})"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
