"""Persistence under ``--data-dir``: the definitions file and the durable message logs.

Synchronous and free of asyncio and sockets: the server calls ``MessageStore.sync()`` (from a
worker thread, once per event-loop tick) and confirms persistent messages when it returns.
Layout: ``definitions.json`` plus its change journal ``definitions.log`` (``definitions``,
``journal``, ``documents``), and ``msgs/<hash>/`` per durable queue that ever held a persistent
message (``layout``), each an append-only segment log (``queuestores``, ``segments``,
``records``), rebuilt after a crash by ``recovery`` and kept bounded by ``compaction``. What
recovery cannot place or use is moved to ``quarantine/``, never deleted (``quarantine``).
"""

from hutch_broker.store.definitions import DefinitionsStore, load_definitions, save_definitions
from hutch_broker.store.errors import (
    CorruptDefinitionsError,
    CorruptRecordError,
    MessageNotFoundError,
    StoreClosedError,
    StoreError,
    StoreLockedError,
    UnsupportedFormatError,
)
from hutch_broker.store.messages import MessageStore
from hutch_broker.store.queuestores import QueueStore
from hutch_broker.store.records import IndexedMessage, StoredMessage

__all__ = [
    "CorruptDefinitionsError",
    "CorruptRecordError",
    "DefinitionsStore",
    "IndexedMessage",
    "MessageNotFoundError",
    "MessageStore",
    "QueueStore",
    "StoreClosedError",
    "StoreError",
    "StoreLockedError",
    "StoredMessage",
    "UnsupportedFormatError",
    "load_definitions",
    "save_definitions",
]
