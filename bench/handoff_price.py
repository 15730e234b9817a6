"""The price of handing a publish from one process to another: the one-flow split's floor.

    PYTHONPATH=broker python bench/handoff_price.py [--rounds 5] [--messages 400000]

Why: hutch-broker runs one flow (one publisher, one queue, one consumer: scenario 1) on one
core, and the design that would give such a flow a second core splits it over two processes,
publishers' side and queue's side (docs/bench/profile.md, "The second core: the decision").
Every message would then cross a process boundary: written by one process, read and parsed by
the other. This prices that crossing alone, as the split would pay it at the least: a
sending process writes whole 1 KiB publishes (method, content header, body frames, 60 to a
write) into a Unix socketpair, and a receiving process reads them and takes each with the
broker's own C scan of a repeated publish (``contentscan.scan_publish``), the cheapest read
the broker has. CPU per message on each side, from ``time.process_time`` of each process,
median and range over the rounds.

The figure is a floor: a real split adds what crosses back (acks, confirms, flow control)
and the work of keeping one owner for each queue. Compare it with the broker's CPU a message
in scenario 1 (``bench/run.py``): the split pays only if each side's share plus this price
is well under the whole.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import time

from hutch_broker.protocol import contentscan
from pamqp import body, commands, frame, header

PER_WRITE = 60  # publishes a write: about 64 KiB, a socket read's worth in the broker
BUFFER = 1 << 20
FRAME_MAX = 131072
MAX_BODY = 1 << 27


def one_publish(size: int = 1024) -> tuple[bytes, bytes]:
    """A whole publish on channel 1 and its method frame's arguments (``last_payload``)."""
    method = frame.marshal(commands.Basic.Publish(exchange="", routing_key="q"), 1)
    whole = (
        method
        + frame.marshal(header.ContentHeader(0, size, commands.Basic.Properties()), 1)
        + frame.marshal(body.ContentBody(b"x" * size), 1)
    )
    return whole, method[11:-1]


def send(sock: socket.socket, messages: int, whole: bytes) -> float:
    """Write ``messages`` publishes; this process's CPU a message, in µs."""
    chunk = whole * PER_WRITE
    started = time.process_time()
    for _ in range(messages // PER_WRITE):
        sock.sendall(chunk)
    return 1e6 * (time.process_time() - started) / messages


def receive(sock: socket.socket, arguments: bytes) -> tuple[int, float]:
    """Read and scan publishes until the sender closes: (how many, CPU a message in µs)."""
    scan = contentscan.scan_publish
    buffer = bytearray()
    raw = b"\x00\x00"
    taken = 0
    started = time.process_time()
    while data := sock.recv(BUFFER):
        buffer += data
        pos = 0
        while (found := scan(buffer, pos, 1, FRAME_MAX, MAX_BODY, arguments, raw)) is not None:
            raw, _, pos = found
            taken += 1
        del buffer[:pos]
    return taken, 1e6 * (time.process_time() - started) / max(taken, 1)


def one_round(messages: int) -> tuple[float, float]:
    """(sender's, receiver's) CPU a message, each in its own process."""
    whole, arguments = one_publish()
    sender, receiver = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    for end in (sender, receiver):
        end.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, BUFFER)
        end.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, BUFFER)
    reader, writer = os.pipe()
    child = os.fork()
    if child == 0:  # the sending process
        receiver.close()
        os.close(reader)
        price = send(sender, messages, whole)
        sender.close()
        os.write(writer, f"{price}".encode())
        os._exit(0)
    sender.close()
    os.close(writer)
    taken, price = receive(receiver, arguments)
    receiver.close()
    sent = float(os.read(reader, 64).decode())
    os.close(reader)
    os.waitpid(child, 0)
    expected = messages // PER_WRITE * PER_WRITE
    if taken != expected:
        raise SystemExit(f"received {taken} publishes of {expected}")
    return sent, price


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--messages", type=int, default=400_000)
    args = parser.parse_args()
    print(f"C scan: {'yes' if contentscan.NATIVE_PUBLISH else 'no (the Python twin)'}")
    rounds = [one_round(args.messages) for _ in range(args.rounds)]
    for side, values in (("sender", [r[0] for r in rounds]), ("receiver", [r[1] for r in rounds])):
        print(
            f"{side:9} {statistics.median(values):.2f} µs/message CPU "
            f"({min(values):.2f}-{max(values):.2f}, {args.rounds} rounds of {args.messages:,})"
        )


if __name__ == "__main__":
    main()
