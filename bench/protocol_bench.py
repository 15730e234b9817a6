"""Micro-benchmark of the sans-I/O protocol core (IMPL-4): parse and encode rates, no sockets.

    PYTHONPATH=broker python bench/protocol_bench.py [--messages 200000] [--body 1024]

Inbound: a client byte stream of basic.publish + header + body (pamqp-encoded, as a client would
send it) is fed in 64 KiB chunks and drained through ``next_event``; likewise basic.ack.
Outbound: ``send_deliver`` / confirm ``send_method`` calls, then ``data_to_send`` joined once,
as ``transport.writelines`` would.  Each figure is the best of a few runs, in process CPU time
(the machine is shared, so wall time mostly measures the neighbours).
"""

from __future__ import annotations

import argparse
import datetime
import time
from collections.abc import Callable

from hutch_broker.protocol import connection, events
from pamqp import body, commands, header
from pamqp import frame as pamqp_frame

CHUNK = 64 * 1024
PIKA_PROPS = commands.Basic.Properties(content_type="text/plain", delivery_mode=2)


def running_connection() -> connection.Connection:
    conn = connection.Connection(server_properties={"product": "Hutch"})
    handshake = b"".join(
        [
            b"AMQP\x00\x00\x09\x01",
            pamqp_frame.marshal(
                commands.Connection.StartOk(mechanism="PLAIN", response="\0guest\0guest"), 0
            ),
            pamqp_frame.marshal(commands.Connection.TuneOk(2047, 131072, 60), 0),
            pamqp_frame.marshal(commands.Connection.Open("/"), 0),
            pamqp_frame.marshal(commands.Channel.Open(), 1),
        ]
    )
    conn.receive_data(handshake)
    while (event := conn.next_event()) is not connection.NEED_DATA:
        if isinstance(event, events.StartOkReceived):
            conn.accept_login()
        elif isinstance(event, events.OpenReceived):
            conn.accept_open()
    conn.data_to_send()
    return conn


def publish_stream(count: int, payload: bytes, props: commands.Basic.Properties | None) -> bytes:
    one = b"".join(
        [
            pamqp_frame.marshal(commands.Basic.Publish(exchange="", routing_key="bench.q"), 1),
            pamqp_frame.marshal(header.ContentHeader(0, len(payload), props), 1),
            pamqp_frame.marshal(body.ContentBody(payload), 1),
        ]
    )
    return one * count


def unique_props_stream(count: int, payload: bytes) -> bytes:
    """Every message with its own message_id and timestamp: no two property blobs alike."""
    publish = pamqp_frame.marshal(commands.Basic.Publish(exchange="", routing_key="bench.q"), 1)
    content = pamqp_frame.marshal(body.ContentBody(payload), 1)
    parts: list[bytes] = []
    for number in range(count):
        props = commands.Basic.Properties(
            content_type="application/json",
            delivery_mode=2,
            message_id=f"msg-{number:012d}",
            timestamp=datetime.datetime.fromtimestamp(1_700_000_000 + number, tz=datetime.UTC),
        )
        parts += (publish, pamqp_frame.marshal(header.ContentHeader(0, len(payload), props), 1))
        parts.append(content)
    return b"".join(parts)


def parse_rate(stream: bytes, count: int) -> float:
    conn = running_connection()
    chunks = [stream[i : i + CHUNK] for i in range(0, len(stream), CHUNK)]
    seen = 0
    started = time.process_time()
    for chunk in chunks:
        conn.receive_data(chunk)
        next_event = conn.next_event
        while next_event() is not connection.NEED_DATA:
            seen += 1
    elapsed = time.process_time() - started
    assert seen == count, (seen, count)
    return count / elapsed


def deliver_rate(count: int, payload: bytes) -> float:
    conn = running_connection()
    raw = PIKA_PROPS.marshal()
    send_deliver = conn.send_deliver
    started = time.process_time()
    for tag in range(1, count + 1):
        send_deliver(1, "ctag", tag, False, "", "bench.q", raw, payload)
        if not tag % 256:  # one writelines per loop tick
            b"".join(conn.data_to_send())
    b"".join(conn.data_to_send())
    return count / (time.process_time() - started)


def confirm_rate(count: int) -> float:
    conn = running_connection()
    send_method = conn.send_method
    started = time.process_time()
    for tag in range(1, count + 1):
        send_method(1, commands.Basic.Ack(tag))
        if not tag % 256:
            b"".join(conn.data_to_send())
    return count / (time.process_time() - started)


def best_of(runs: int, measure: Callable[[], float]) -> float:
    return max(measure() for _ in range(runs))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--body", type=int, default=1024)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    count, payload = args.messages, b"x" * args.body

    bare = publish_stream(count, payload, None)
    with_props = publish_stream(count, payload, PIKA_PROPS)
    unique = unique_props_stream(count, payload)
    acks = b"".join(pamqp_frame.marshal(commands.Basic.Ack(tag), 1) for tag in range(1, count + 1))
    results = {
        f"parse publish, {args.body} B body, no properties": best_of(
            args.runs, lambda: parse_rate(bare, count)
        ),
        f"parse publish, {args.body} B body, content_type + delivery_mode": best_of(
            args.runs, lambda: parse_rate(with_props, count)
        ),
        f"parse publish, {args.body} B body, unique message_id + timestamp": best_of(
            args.runs, lambda: parse_rate(unique, count)
        ),
        "parse basic.ack": best_of(args.runs, lambda: parse_rate(acks, count)),
        f"encode deliver, {args.body} B body": best_of(
            args.runs, lambda: deliver_rate(count, payload)
        ),
        "encode confirm basic.ack": best_of(args.runs, lambda: confirm_rate(count)),
    }
    width = max(map(len, results))
    for name, rate in results.items():
        print(f"{name:<{width}}  {rate / 1000:8.0f}k/s")


if __name__ == "__main__":
    main()
