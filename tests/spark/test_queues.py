"""One query over several queues (option `queues`): one consumer each, per-queue offsets.

Each queue is its own sequence: `seq` counts per queue, the `queue` column says which, each
queue contributes at most maxMessagesPerBatch to a batch, and acks, failures and restarts work
per queue exactly as for one queue (docs/spark.md, "Several queues in one query").
"""

import json
from pathlib import Path
from typing import Any

import pytest

from tests.spark.querywaits import wait_count, wait_ended, wait_every

# hutch-broker: one per module, each test in a vhost of its own (amqp.url names it); RabbitMQ:
# the session's node, unique queue names.
pytestmark = [pytest.mark.spark, pytest.mark.shared_broker]

BATCH = 100


def stream(spark: Any, amqp: Any, queues: list[str], **options: str) -> Any:
    return (
        spark.readStream.format("hutch")
        .option("uri", amqp.url)
        .option("queues", ",".join(queues))
        .option("maxMessagesPerBatch", str(BATCH))
        .options(**options)
        .load()
    )


def recorder(batches: list[tuple[int, list[tuple[str, int, str]]]], fail_at: int | None = None):
    def write(frame: Any, batch_id: int) -> None:
        rows = frame.select("queue", "seq", "message_id").collect()
        batches.append((batch_id, [(row.queue, row.seq, row.message_id) for row in rows]))
        if batch_id == fail_at:
            raise RuntimeError(f"sink failed on batch {batch_id}")

    return write


def start(frame: Any, sink: Any, checkpoint: Path) -> Any:
    return (
        frame.writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(checkpoint))
        .trigger(processingTime="200 milliseconds")
        .start()
    )


def test_two_queues_in_one_query_lose_nothing_across_a_failed_batch(
    spark: Any, amqp: Any, tmp_path: Path, waiter: Any
) -> None:
    small, large = amqp.queue("multi-a"), amqp.queue("multi-b")
    expected = {
        small: set(amqp.publish(small, 150)),
        large: set(amqp.publish(large, 250, start=1000)),
    }
    checkpoint = tmp_path / "checkpoint"
    first: list[tuple[int, list[tuple[str, int, str]]]] = []
    query = start(stream(spark, amqp, [small, large]), recorder(first, fail_at=2), checkpoint)
    wait_ended("the failed batch 2", query, lambda: len(first), "batches collected")
    with pytest.raises(Exception, match="sink failed on batch 2"):
        query.awaitTermination()
    committed = [row for batch_id, rows in first if batch_id < 2 for row in rows]
    waiter("our consumers gone", lambda: amqp.consumers(small) + amqp.consumers(large) == 0, 15)
    for queue in (small, large):  # committed batches were acked, per queue; nothing else
        assert amqp.ready(queue) == len(expected[queue]) - sum(r[0] == queue for r in committed)

    second: list[tuple[int, list[tuple[str, int, str]]]] = []
    query = start(stream(spark, amqp, [small, large]), recorder(second), checkpoint)
    try:
        wait_every(
            "every message of both queues",
            {(q, m) for q, ids in expected.items() for m in ids},
            lambda: ((r[0], r[2]) for r in committed + [r for _, rows in second for r in rows]),
            query,
        )
        waiter("an idle trigger", lambda: query.status["isTriggerActive"] is False, 30)
    finally:
        query.stop()
    assert [rows for batch_id, rows in second if batch_id == 2] == [[]]  # replays empty
    rows = committed + [row for _, batch in second for row in batch]
    for queue, ids in expected.items():
        seen = [message_id for q, _, message_id in rows if q == queue]
        assert set(seen) == ids
        assert len(seen) - len(ids) <= BATCH  # at most the failed batch's share, again
    for batch_id, batch in first + second:  # each queue adds at most one batch's worth
        for queue in expected:
            assert sum(q == queue for q, _, _ in batch) <= BATCH, batch_id
    committed_seqs = {(q, s) for batch_id, batch in first if batch_id < 2 for q, s, _ in batch}
    later_seqs = [(q, s) for _, batch in second for q, s, _ in batch]
    assert not committed_seqs & set(later_seqs)  # seq continues per queue after the restart
    waiter("our consumers gone", lambda: amqp.consumers(small) + amqp.consumers(large) == 0, 15)
    for queue, ids in expected.items():  # acked but for a last batch the stop may have beaten
        amqp.left_after_stop(queue, ids, BATCH)


@pytest.mark.parametrize("broker", ["hutch"], indirect=True)  # the log is broker-agnostic
def test_durable_batches_of_two_queues_replay_identically(
    spark: Any, amqp: Any, tmp_path: Path, waiter: Any
) -> None:
    one, two = amqp.queue("durable-a"), amqp.queue("durable-b")
    expected = {(one, m) for m in amqp.publish(one, 120)}
    expected |= {(two, m) for m in amqp.publish(two, 180, start=1000)}
    checkpoint, log_dir = tmp_path / "checkpoint", tmp_path / "checkpoint" / "hutch-batches"
    durable = {"durableBatches": "true", "batchLogDir": str(log_dir)}
    first: list[tuple[int, list[tuple[str, int, str]]]] = []
    query = start(stream(spark, amqp, [one, two], **durable), recorder(first, 1), checkpoint)
    wait_ended("the failed batch 1", query, lambda: len(first), "batches collected")
    with pytest.raises(Exception, match="sink failed on batch 1"):
        query.awaitTermination()
    failed = sorted(row for batch_id, rows in first if batch_id == 1 for row in rows)
    assert failed
    assert sorted(p.name for p in log_dir.iterdir()) == sorted([one, two])  # a log per queue

    second: list[tuple[int, list[tuple[str, int, str]]]] = []
    query = start(stream(spark, amqp, [one, two], **durable), recorder(second), checkpoint)
    try:
        # Batch 0 was committed: the replay of batch 1 is the second run's first batch.
        wait_count(
            "the replayed batch",
            lambda: sum(b == 1 for b, _ in second),
            1,
            query,
            "batch 1 replays collected",
        )
        waiter("an idle trigger", lambda: query.status["isTriggerActive"] is False, 30)
    finally:
        query.stop()
    assert sorted(row for b, rows in second if b == 1 for row in rows) == failed  # identical
    rows = [r for b, batch in first if b < 1 for r in batch] + [r for _, b in second for r in b]
    assert sorted((q, m) for q, _, m in rows) == sorted(expected)  # exactly once
    waiter("our consumers gone", lambda: amqp.consumers(one) + amqp.consumers(two) == 0, 15)
    assert amqp.ready(one) == amqp.ready(two) == 0


def test_a_checkpoint_of_other_queues_is_refused(
    spark: Any, amqp: Any, tmp_path: Path, waiter: Any
) -> None:
    one, two, other = amqp.queue("ck-a"), amqp.queue("ck-b"), amqp.queue("ck-c")
    amqp.publish(one, 5)
    checkpoint = tmp_path / "checkpoint"
    seen: list[tuple[int, list[tuple[str, int, str]]]] = []
    query = start(stream(spark, amqp, [one, two]), recorder(seen), checkpoint)
    try:
        wait_count(
            "the first batch",
            lambda: sum(len(rows) for _, rows in seen),
            5,
            query,
            "rows collected",
        )
    finally:
        query.stop()
    query = start(stream(spark, amqp, [one, other]), recorder([]), checkpoint)
    with pytest.raises(Exception, match="use a new checkpointLocation"):
        query.awaitTermination(60)


def test_batch_read_of_two_queues_reads_each_in_its_own_partition(spark: Any, amqp: Any) -> None:
    one, two = amqp.queue("read-a"), amqp.queue("read-b")
    amqp.publish(one, 3)
    amqp.publish(two, 4, start=10)
    frame = (
        spark.read.format("hutch").option("uri", amqp.url).option("queues", f"{one}, {two}").load()
    )
    assert frame.rdd.getNumPartitions() == 2
    rows = frame.select("queue", "seq", "body").collect()
    by_queue = {
        q: [(r.seq, json.loads(r.body)["n"]) for r in rows if r.queue == q] for q in (one, two)
    }
    assert by_queue == {one: [(1, 0), (2, 1), (3, 2)], two: [(1, 10), (2, 11), (3, 12), (4, 13)]}
