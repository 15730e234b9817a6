"""What the model needs of a message store, as protocols: the model never names the disk store.

A queue keeps its durable messages in a log (``QueueLog``) and pages bodies out to logs it
opens from a store (``LogStore``). The model is sans-I/O and is tested with in-memory logs;
the server hands it the disk store (``store.MessageStore``, whose ``open_queue`` returns a
``store.QueueStore``), which satisfies these protocols by shape. So the model imports from
``hutch_broker.store`` only the record format (``records``: what a stored message is, how a
msg id splits into segment and offset, a record's size) and its errors, and an import
contract keeps it that way. The methods listed here are exactly the ones the model calls:
recovery (``QueueStore.recover``) and the group commit stay the server's business.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from hutch_broker.store.records import RunRecord, StoredMessage


class QueueLog(Protocol):
    """One queue's append-only message log; a record's id is the log's ``msg_id``."""

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
        """Buffer a record; returns its msg_id (durable after the store's next sync)."""
        ...

    def read(self, msg_id: int) -> StoredMessage:
        """A live record back, body included; raises ``StoreError`` when it cannot."""
        ...

    def read_run(self, msg_id: int, max_bytes: int) -> list[RunRecord]:
        """Live record ``msg_id`` and those laid right after it (about ``max_bytes`` in all),
        each with its length in the log: a stream's read-ahead. Errors as ``read``."""
        ...

    def ack(self, msg_id: int) -> None:
        """The record is gone for good; unknown or acked ids are ignored."""
        ...

    def purge(self) -> None:
        """Every record is gone."""
        ...

    def rotate(self) -> None:
        """Seal the segment being written (a stream's own segment size)."""
        ...

    def drop_segment(self, number: int) -> bool:
        """Ack every record of a sealed segment (a stream's retention)."""
        ...


class LogStore(Protocol):
    """Where queue logs come from: the paging store (bodies out of memory under pressure)."""

    def open_queue(self, vhost: str, queue: str) -> QueueLog:
        """The queue's log, the same object while it is open."""
        ...

    def delete_queue(self, vhost: str, queue: str) -> None:
        """Remove the queue's log, open or not."""
        ...

    def sync(self) -> None:
        """Make what was appended and acked durable (lets fully read segments go)."""
        ...
