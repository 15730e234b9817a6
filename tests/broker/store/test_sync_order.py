"""A group commit writes every log's records before any log's acks.

Dead-lettering moves a message: an append in the dead-letter queue's log, an ack in the
source's. ``kill -9`` keeps whatever reached the kernel, so if an ack could be written before
the append of the same pass, a crash between them would lose the message from both queues.
The torture suite could not see it because its dead-letter queues happened to be flushed
first; this test checks the order of the write syscalls whatever the queues' order.
"""

from __future__ import annotations

import shutil

import pytest
from hutch_broker.store import MessageStore, segments


@pytest.mark.parametrize("order", [("source", "dead"), ("dead", "source")])
def test_every_append_reaches_the_kernel_before_any_ack(tmp_path, monkeypatch, order):
    store = MessageStore(tmp_path, segment_size=1 << 20)
    logs = {name: store.open_queue("/", name) for name in order}
    fields = {
        "enqueued_at_ms": 1,
        "expire_at_ms": 0,
        "exchange": "",
        "raw_properties": b"",
        "body": b"payload",
    }
    moved = logs["source"].append(routing_key="k", **fields)
    store.sync()
    writes: list[str] = []
    pwrite_all, write_all = segments._pwrite_all, segments._write_all

    def record(fd, data, offset):
        writes.append("append")
        pwrite_all(fd, data, offset)

    def ack(fd, data):
        writes.append("ack")
        write_all(fd, data)

    monkeypatch.setattr(segments, "_pwrite_all", record)
    monkeypatch.setattr(segments, "_write_all", ack)
    logs["source"].ack(moved)  # dead-lettered: gone from the source ...
    logs["dead"].append(routing_key="k", **fields)  # ... into the dead-letter queue
    store.sync()
    store.close()
    assert writes == ["append", "ack"]


def test_an_ack_made_before_a_sync_survives_its_segment_retiring_during_the_sync(tmp_path):
    """Acks buffered when a pass begins belong to that pass, whatever happens meanwhile.

    Found by the kill -9 test under load: an ack made before a sync began, then the last live
    record of the same sealed segment acked while the sync ran (retiring the segment, whose
    file is only unlinked after the next pass), and the first ack was dropped with the
    segment's buffers instead of being written: a confirmed ack undone by a crash.
    """
    store = MessageStore(tmp_path, segment_size=256)
    log = store.open_queue("/", "q")
    fields = {"enqueued_at_ms": 1, "expire_at_ms": 0, "exchange": "", "raw_properties": b""}
    first, second = (log.append(routing_key="k", body=b"x" * 60, **fields) for _ in range(2))
    for _ in range(4):  # fills the segment: first and second sit in a sealed one
        log.append(routing_key="k", body=b"y" * 60, **fields)
    store.sync()
    log.ack(first)  # acked, and confirmed by the sync that starts next
    sync_pass = log.begin_sync()
    assert sync_pass is not None
    log.ack(second)  # meanwhile: the segment's last live record goes, the segment retires
    log.write_acks(sync_pass)
    sync_pass.run()
    log.end_sync(sync_pass)
    crashed = tmp_path / "crashed"
    shutil.copytree(tmp_path / "msgs", crashed / "msgs")  # kill -9 now
    store.close()
    recovered = MessageStore(crashed).open_queue("/", "q")
    assert first not in [message.msg_id for message in recovered.recover()]
