"""The model's storage protocols (model/storage.py) against the disk store and an in-memory log.

The model names only ``QueueLog`` and ``LogStore``; the disk store satisfies them by shape. mypy
checks that where the server hands the store over; these tests keep the protocols honest at
run time too: each method the model may call exists on the concrete class with the same
parameters, an in-memory log is enough for a queue, and the import contract that keeps the
model off the concrete store names every store module but the record format and the errors.
The disk store's own tests (tests/broker/store) remain the proof of what it does.
"""

from __future__ import annotations

import configparser
import inspect
import pkgutil
from pathlib import Path
from typing import Any

import hutch_broker.store
import pytest
from hutch_broker.model import storage
from hutch_broker.model.broker import Broker
from hutch_broker.model.messages import Message
from hutch_broker.model.queues import PUBLISH_SYNC, Queue
from hutch_broker.protocol import properties
from hutch_broker.store import MessageStore, QueueStore
from hutch_broker.store.records import RunRecord, StoredMessage, run_record

ROOT = Path(__file__).resolve().parents[3]
CONTRACT = "importlinter:contract:model-sees-the-store-protocol"
# The record format (with _runs, its run decoder in C) and the store's errors: values, no I/O.
ALLOWED = {"records", "_runs", "errors"}


def protocol_methods(protocol: type) -> list[str]:
    return [name for name in vars(protocol) if not name.startswith("_")]


def parameters(function: Any) -> list[tuple[str, Any]]:
    return [(p.name, p.kind) for p in inspect.signature(function).parameters.values()]


class MemoryLog:
    """A queue log in a dict: what a model test needs, and nothing written anywhere."""

    def __init__(self) -> None:
        self.records: dict[int, StoredMessage] = {}
        self.next_id = 1

    def append(
        self,
        *,
        enqueued_at_ms: int,
        expire_at_ms: int,
        exchange: str,
        routing_key: str,
        raw_properties: bytes,
        body: bytes,
    ) -> int:
        msg_id, self.next_id = self.next_id, self.next_id + 1
        self.records[msg_id] = StoredMessage(
            msg_id, enqueued_at_ms, expire_at_ms, exchange, routing_key, raw_properties, body
        )
        return msg_id

    def read(self, msg_id: int) -> StoredMessage:
        return self.records[msg_id]

    def read_run(self, msg_id: int, max_bytes: int) -> list[RunRecord]:
        # ids here are consecutive: the next is one on
        return [run_record(self.records[msg_id], 1)]

    def ack(self, msg_id: int) -> None:
        self.records.pop(msg_id, None)

    def purge(self) -> None:
        self.records.clear()

    def rotate(self) -> None:
        pass

    def drop_segment(self, number: int) -> bool:
        return False


@pytest.mark.parametrize(
    ("protocol", "concrete"),
    [(storage.QueueLog, QueueStore), (storage.LogStore, MessageStore)],
)
def test_the_disk_store_has_every_method_of_the_protocol_with_the_same_parameters(
    protocol: type, concrete: type
) -> None:
    names = protocol_methods(protocol)
    assert names, "a protocol without methods checks nothing"
    for name in names:
        assert parameters(getattr(concrete, name)) == parameters(getattr(protocol, name)), name


def test_an_in_memory_log_has_every_method_of_the_queue_log_protocol() -> None:
    for name in protocol_methods(storage.QueueLog):
        assert parameters(getattr(MemoryLog, name)) == parameters(getattr(storage.QueueLog, name))


def test_a_durable_queue_keeps_persistent_messages_in_any_queue_log() -> None:
    log = MemoryLog()
    queue = Queue("q", durable=True, store=log)
    persistent = properties.encode_properties(delivery_mode=2)
    assert queue.publish(Message("", "q", persistent, b"a", persistent=True), 5) == PUBLISH_SYNC
    assert [(r.body, r.enqueued_at_ms) for r in log.records.values()] == [(b"a", 5)]
    entry = queue.get(6, no_ack=False)
    assert entry is not None
    queue.settle(entry)
    assert log.records == {}


class MemoryLogs:
    """A ``LogStore`` of in-memory logs, recording what the model opens and deletes."""

    def __init__(self) -> None:
        self.logs: dict[tuple[str, str], MemoryLog] = {}
        self.deleted: list[tuple[str, str]] = []

    def open_queue(self, vhost: str, queue: str) -> MemoryLog:
        return self.logs.setdefault((vhost, queue), MemoryLog())

    def delete_queue(self, vhost: str, queue: str) -> None:
        self.logs.pop((vhost, queue), None)
        self.deleted.append((vhost, queue))

    def sync(self) -> None:
        pass


def test_a_durable_queue_is_declared_with_its_log_and_deleted_with_it() -> None:
    """The log is a constructor argument: no queue exists, even briefly, without it."""
    logs = MemoryLogs()
    broker = Broker(message_logs=logs, loopback_users=[])
    vhost, _ = broker.add_vhost("v")
    durable, _ = vhost.declare_queue("d", durable=True, now_ms=0)
    stream, _ = vhost.declare_queue(
        "s", durable=True, arguments={"x-queue-type": "stream"}, now_ms=0
    )
    transient, _ = vhost.declare_queue("t", now_ms=0)
    assert durable.store is logs.logs[("v", "d")] and stream.store is logs.logs[("v", "s")]
    assert transient.store is None and set(logs.logs) == {("v", "d"), ("v", "s")}
    assert broker.loopback_users == []
    vhost.delete_queue("t")
    vhost.delete_queue("d")
    assert logs.deleted == [("v", "d")] and durable.store is None


def test_a_vhost_of_a_broker_shares_its_clock_pager_and_scheduler_from_construction() -> None:
    broker = Broker(clock=lambda: 42)
    vhost, _ = broker.add_vhost("v")
    queue, _ = vhost.declare_queue("q", arguments={"x-expires": 1000})
    assert vhost.clock() == 42 and queue.last_used_ms == 42
    assert vhost.pager is broker.pager and queue.pager is broker.pager
    assert vhost.backlog.scheduler is broker.scheduler and vhost.streams is broker.streams


def test_the_import_contract_forbids_every_store_module_but_the_format_and_the_errors() -> None:
    config = configparser.ConfigParser()
    config.read(ROOT / ".importlinter")
    assert config[CONTRACT]["source_modules"].split() == ["hutch_broker.model"]
    forbidden = set(config[CONTRACT]["forbidden_modules"].split())
    modules = {info.name for info in pkgutil.iter_modules(hutch_broker.store.__path__)}
    assert modules >= ALLOWED
    assert forbidden == {f"hutch_broker.store.{name}" for name in modules - ALLOWED}
