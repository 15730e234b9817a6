"""Streaming offsets and the ack ledger: which broker deliveries a Spark offset stands for.

Why: Spark checkpoints only the JSON offset `{"queue": name, "seq": n}` (n = messages handed
to Spark so far), or `{"queues": {name: n, ...}}` for a source reading several queues (option
`queues`): each queue is its own sequence, consumed, planned and acked independently. The
broker only knows delivery tags, which are scoped to one channel. The
ledger maps each planned batch's end seq to the channel epoch and the last delivery tag in it,
so that once Spark has committed a batch the driver can ack it with one
`basic.ack(tag, multiple=true)`. Entries from an older epoch (a channel that has since closed)
are dropped, never acked: the broker has already re-queued those messages, and acking a tag on
the wrong channel closes it with 406 PRECONDITION_FAILED (docs/contracts/spark.md#ack-protocol
and #offsets).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from hutch_spark.errors import HutchOffsetError


def make(queue: str, seq: int) -> dict[str, Any]:
    """The JSON offset Spark stores in its offsets/ log."""
    return {"queue": queue, "seq": seq}


def make_many(seqs: Mapping[str, int], *, per_queue: bool) -> dict[str, Any]:
    """The offset of a source over `seqs`' queues: the single-queue shape unless `per_queue`."""
    if not per_queue:
        ((queue, seq),) = seqs.items()
        return make(queue, seq)
    return {"queues": dict(seqs)}


def seqs_of(
    offset: Mapping[str, Any], queues: tuple[str, ...], *, per_queue: bool
) -> dict[str, int]:
    """Each queue's seq; an offset naming other queues is an error, not a reset."""
    if not per_queue:
        return {queues[0]: seq_of(offset, queues[0])}
    held = offset.get("queues")
    if not isinstance(held, Mapping):
        raise HutchOffsetError(
            f"hutch: the checkpoint holds the offset {dict(offset)!r}, but this source reads "
            f"queues {list(queues)!r} (option 'queues'); use a new checkpointLocation"
        )
    if set(held) != set(queues):
        raise HutchOffsetError(
            f"hutch: the checkpoint holds offsets of queues {sorted(held)!r}, but this source "
            f"reads queues {sorted(queues)!r}; use a new checkpointLocation"
        )
    return {queue: seq_of({"queue": queue, "seq": held[queue]}, queue) for queue in queues}


def seq_of(offset: Mapping[str, Any], queue: str) -> int:
    """The seq of an offset of this source; another queue's offset is an error, not a reset."""
    if offset.get("queue") != queue:
        raise HutchOffsetError(
            f"hutch: the checkpoint holds an offset of queue {offset.get('queue')!r}, but this "
            f"source reads queue {queue!r}; use a new checkpointLocation"
        )
    seq = offset.get("seq")
    if not isinstance(seq, int) or isinstance(seq, bool) or seq < 0:
        raise HutchOffsetError(f"hutch: malformed offset {dict(offset)!r} (seq must be >= 0)")
    return seq


@dataclass(frozen=True)
class LedgerEntry:
    """The broker side of one planned batch."""

    end_seq: int
    epoch: int
    last_tag: int


class AckLedger:
    """Planned-but-unacked batches, oldest first; single-threaded (the driver's runner)."""

    def __init__(self) -> None:
        self._entries: list[LedgerEntry] = []

    def record(self, *, end_seq: int, epoch: int, last_tag: int) -> None:
        """Remembers that the batch ending at `end_seq` holds tags up to `last_tag`."""
        self._entries.append(LedgerEntry(end_seq=end_seq, epoch=epoch, last_tag=last_tag))

    def release_through(self, seq: int, *, epoch: int | None) -> int | None:
        """Forgets batches ending at or below `seq`; returns the tag to ack, if any.

        Only entries of the live `epoch` yield a tag (None when no channel is open); entries of
        older epochs are discarded because their messages were re-queued by the broker.
        """
        released = [entry for entry in self._entries if entry.end_seq <= seq]
        self._entries = [entry for entry in self._entries if entry.end_seq > seq]
        tags = [entry.last_tag for entry in released if entry.epoch == epoch]
        return max(tags) if tags else None

    def __len__(self) -> int:
        return len(self._entries)
