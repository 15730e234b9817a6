"""The real broker process on a damaged data directory ("Broker trust" 4).

Before: one flipped version byte in one segment header, or one damaged queue log, stopped the
whole broker from starting, and a queue log without a queue was deleted without a word. Now the
broker starts, serves every healthy queue, logs an ERROR line per finding and keeps the damaged
data under ``<data-dir>/quarantine/``.
"""

from __future__ import annotations

import json
import shutil
import signal

import pika
from hutch_broker.store import layout
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
    unreadable[:20] = bytes(20)  # file header and salt gone: no record can be verified
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
