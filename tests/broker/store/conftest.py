"""Fixtures for the message store tests: stores that are always closed, message factories.

Helpers are handed out as fixtures because test modules cannot import each other (or this
file) under ``--import-mode=importlib``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hutch_broker.store import IndexedMessage, MessageStore, QueueStore, StoredMessage

SMALL_SEGMENT = 1024


def message_fields(index: int, *, body_size: int = 40) -> dict[str, Any]:
    """Keyword arguments for ``QueueStore.append``; every field depends on ``index``."""
    stem = f"body-{index}-".encode()
    return {
        "enqueued_at_ms": 1_700_000_000_000 + index,
        "expire_at_ms": 0 if index % 3 else 1_800_000_000_000 + index,
        "exchange": "amq.direct" if index % 2 else "",
        "routing_key": f"key.{index}",
        "raw_properties": b"\x90\x00" + bytes([index % 256]) * (index % 7),
        "body": (stem * (body_size // len(stem) + 1))[:body_size],
    }


def fill_queue(store: QueueStore, count: int, *, body_size: int = 40, first: int = 0) -> list[int]:
    """Append messages ``first .. first + count - 1``; their msg_ids."""
    return [
        store.append(**message_fields(index, body_size=body_size))
        for index in range(first, first + count)
    ]


def read_back_messages(queue: QueueStore) -> list[StoredMessage]:
    """What a recovered queue serves: ``recover()``'s index (which holds no body), each body
    read back from disk as a queue does when the message reaches its head; every index entry
    must describe the record read back."""
    served = []
    for indexed in queue.recover():
        stored = queue.read(indexed.msg_id)
        assert indexed == index_of(stored), "the index does not describe its record"
        served.append(stored)
    return served


def index_of(stored: StoredMessage) -> IndexedMessage:
    return IndexedMessage(
        stored.msg_id,
        stored.enqueued_at_ms,
        stored.expire_at_ms,
        stored.exchange,
        stored.routing_key,
        stored.raw_properties,
        len(stored.body),
    )


def segment_files(store: QueueStore, prefix: str = "msgs.") -> list[str]:
    return sorted(path.name for path in store.directory.iterdir() if path.name.startswith(prefix))


@pytest.fixture
def fields() -> Callable[..., dict[str, Any]]:
    return message_fields


@pytest.fixture
def fill() -> Callable[..., list[int]]:
    return fill_queue


@pytest.fixture
def read_back() -> Callable[[QueueStore], list[StoredMessage]]:
    return read_back_messages


@pytest.fixture
def files_of() -> Callable[..., list[str]]:
    return segment_files


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "data"


@pytest.fixture
def open_store(data_dir: Path) -> Iterator[Callable[..., MessageStore]]:
    """Open a MessageStore on ``data_dir`` (or another directory); all closed at teardown."""
    opened: list[MessageStore] = []

    def opener(directory: Path | None = None, *, segment_size: int = SMALL_SEGMENT) -> MessageStore:
        store = MessageStore(directory or data_dir, segment_size=segment_size)
        opened.append(store)
        return store

    yield opener
    for store in opened:
        store.close()
