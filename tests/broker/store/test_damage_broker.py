"""The real broker process on a damaged data directory ("Broker trust" 4, issue #30 item 12).

Before: one flipped version byte in one segment header, or one damaged queue log, stopped the
whole broker from starting, and a queue log without a queue was deleted without a word. Now the
broker starts, serves every healthy queue, logs an ERROR line per finding and keeps the damaged
data under ``<data-dir>/quarantine/``.

Item 12: one flipped byte in a segment's salt made every record of it unreadable (the segment
was set aside, confirmed messages and all), and a segment copied into another queue's
directory was served as that queue's. Segment headers now hold two copies (either restores the
other) and the identity of their queue.
"""

from __future__ import annotations

import json
import shutil
import signal

import pika
from hutch_broker.store import layout, records
from hutch_testing.clients import connect, drain

PERSISTENT = pika.BasicProperties(delivery_mode=2)
SEGMENT = "msgs.0000000001"
QUEUES = ("healthy", "victim", "flipped")


def bodies(name: str) -> list[bytes]:
    return [f"{name} {index}".encode() for index in range(20)]


def test_the_broker_starts_on_a_damaged_data_dir_and_keeps_the_damage(hutch_broker):
    connection = connect(hutch_broker)
    channel = connection.channel()
    channel.confirm_delivery()
    for name in QUEUES:
        channel.queue_declare(name, durable=True)
        for body in bodies(name):
            channel.basic_publish("", name, body, PERSISTENT)
    connection.close()
    hutch_broker.kill(signal.SIGTERM)  # a clean stop: everything is on disk

    root = hutch_broker.data_dir / "msgs" / "msgs"
    victim = layout.queue_path(root, "/", "victim")
    unreadable = bytearray((victim / SEGMENT).read_bytes())
    unreadable[: records.FILE_HEADER_SIZE] = bytes(records.FILE_HEADER_SIZE)  # both copies of
    # the header gone, and the salt with them: no record can be verified
    (victim / SEGMENT).write_bytes(bytes(unreadable))
    flipped = bytearray((layout.queue_path(root, "/", "flipped") / SEGMENT).read_bytes())
    flipped[4] ^= 0x02  # the version byte that used to stop the broker
    (layout.queue_path(root, "/", "flipped") / SEGMENT).write_bytes(bytes(flipped))
    ghost = root / ("0" * 32)  # a log whose queue is in no definitions
    shutil.copytree(layout.queue_path(root, "/", "healthy"), ghost)
    (ghost / layout.META_FILE).write_text(json.dumps({"vhost": "/", "queue": "ghost"}))

    hutch_broker.start()

    channel = connect(hutch_broker).channel()
    assert drain(channel, "healthy") == bodies("healthy")
    assert drain(channel, "flipped") == bodies("flipped")
    assert drain(channel, "victim") == []
    console = hutch_broker.console_log.read_text(encoding="utf-8")
    errors = [line for line in console.splitlines() if " ERROR " in line]
    assert any(str(victim / SEGMENT) in line for line in errors), console
    assert any(ghost.name in line for line in errors), console
    quarantine = hutch_broker.data_dir / "quarantine"
    kept = {path.name for path in quarantine.rglob("*")}
    assert {SEGMENT, ghost.name, "REASON.txt"} <= kept
    (moved,) = quarantine.glob(f"*-{victim.name}-{SEGMENT}")
    assert (moved / SEGMENT).read_bytes() == bytes(unreadable)
    assert not ghost.exists()


def publish(channel, queues: dict[str, list[bytes]]) -> None:
    for name, messages in queues.items():
        channel.queue_declare(name, durable=True)
        for body in messages:
            channel.basic_publish("", name, body, PERSISTENT)


def console_lines(broker, level: str) -> list[str]:
    text = broker.console_log.read_text(encoding="utf-8")
    return [line for line in text.splitlines() if f" {level} " in line]


def test_any_one_flipped_header_byte_is_repaired_and_every_message_delivered(hutch_broker):
    """One queue per byte of the 80-byte header, each with that byte flipped, one restart."""
    queues = {f"h{position:02d}": bodies(f"h{position:02d}")[:3] for position in range(80)}
    channel = connect(hutch_broker).channel()
    channel.confirm_delivery()
    publish(channel, queues)
    channel.connection.close()
    hutch_broker.kill(signal.SIGTERM)
    root = hutch_broker.data_dir / "msgs" / "msgs"
    segments = {}
    for position, name in enumerate(queues):
        segment = layout.queue_path(root, "/", name) / SEGMENT
        data = bytearray(segment.read_bytes())
        assert records.parse_file_header(data).state is records.HeaderState.VALID
        data[position] ^= 0xFF
        segment.write_bytes(bytes(data))
        segments[name] = segment

    hutch_broker.start()

    channel = connect(hutch_broker).channel()
    for name, expected in queues.items():
        assert drain(channel, name) == expected, name
    assert console_lines(hutch_broker, "ERROR") == []
    warnings = console_lines(hutch_broker, "WARNING")
    for name, segment in segments.items():
        (line,) = [line for line in warnings if str(segment) in line]
        assert "restored from the intact copy, all 3 records recovered" in line, name
        header = records.parse_file_header(segment.read_bytes())
        assert header.state is records.HeaderState.VALID, name


def test_a_segment_copied_from_another_queue_is_set_aside(hutch_broker):
    """Before, B served A's messages (the acked ones too) and lost one of its own: A's records
    read as compaction copies of B's ids, and the newer copy wins."""
    own = {"a": bodies("a")[:8], "b": bodies("b")[:8]}
    channel = connect(hutch_broker).channel()
    channel.confirm_delivery()
    publish(channel, own)
    acked = drain(channel, "a")[:4]  # basic.get with auto-ack: acked in A's log
    channel.basic_publish("", "a", b"a requeued", PERSISTENT)
    channel.connection.close()
    hutch_broker.kill(signal.SIGTERM)
    root = hutch_broker.data_dir / "msgs" / "msgs"
    queue_a, queue_b = (layout.queue_path(root, "/", name) for name in ("a", "b"))
    foreign = queue_b / "msgs.0000000007"  # a name B never used: a file name B accepts
    foreign.write_bytes((queue_a / SEGMENT).read_bytes())

    hutch_broker.start()

    channel = connect(hutch_broker).channel()
    assert drain(channel, "b") == own["b"]
    assert acked and not set(acked) & set(drain(channel, "a"))
    (line,) = [line for line in console_lines(hutch_broker, "ERROR") if str(foreign) in line]
    assert "segment of another queue: its header names queue 'a' in vhost '/'" in line
    assert "this log is that of queue 'b' in vhost '/'" in line
    assert not foreign.exists()
    (entry,) = (hutch_broker.data_dir / "quarantine").glob(f"*-{queue_b.name}-{foreign.name}")
    assert (entry / foreign.name).read_bytes() == (queue_a / SEGMENT).read_bytes()
