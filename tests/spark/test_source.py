"""The streaming source and the batch reader against a real broker, with Spark in local mode.

Each test is one of the contract's required behaviours (docs/contracts/spark.md#required-tests):
every message delivered, no stall when prefetch equals the batch size, a failing sink loses nothing
and duplicates at most one batch, availableNow drains and stops, bad options and a missing queue
fail fast with a clear message. "Nothing left unacked" is checked after our consumer has gone
(consumer_count 0): an unacked message would then be back in the ready count.
"""

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.spark.querywaits import wait_count, wait_ended, wait_every

# hutch-broker: one per module, each test in a vhost of its own (amqp.url names it); RabbitMQ:
# the session's node, unique queue names.
pytestmark = [pytest.mark.spark, pytest.mark.shared_broker]

BATCH = 100


def hutch_stream(spark: Any, amqp: Any, queue: str, **options: object) -> Any:
    reader = spark.readStream.format("hutch").option("uri", amqp.url).option("queue", queue)
    for key, value in options.items():
        reader = reader.option(key, str(value))
    return reader.load()


def collect_into(
    batches: list[tuple[int, list[str]]],
    fail_at: int | None = None,
    then: Callable[[int], None] | None = None,
) -> Any:
    """A foreachBatch function that records (batch id, message ids), then calls `then` with
    the batch id, optionally then fails."""

    def write(frame: Any, batch_id: int) -> None:
        batches.append((batch_id, [row.message_id for row in frame.select("message_id").collect()]))
        if then is not None:
            then(batch_id)
        if batch_id == fail_at:
            raise RuntimeError(f"sink failed on batch {batch_id}")

    return write


def restart_once_after(broker: Any, at: int, restarts: list[int]) -> Callable[[int], None]:
    """A `then` for collect_into: restarts `broker` once, after batch `at` was collected, and
    records it in `restarts` (a test asserts the restart really happened)."""

    def restart(batch_id: int) -> None:
        if batch_id == at and not restarts:
            restarts.append(batch_id)
            broker.restart()

    return restart


def start(frame: Any, sink: Any, checkpoint: Path, **trigger: Any) -> Any:
    writer = frame.writeStream.foreachBatch(sink).option("checkpointLocation", str(checkpoint))
    return writer.trigger(**(trigger or {"processingTime": "200 milliseconds"})).start()


def test_stream_delivers_all_messages_when_prefetch_equals_batch(
    spark: Any, amqp: Any, tmp_path: Path, waiter: Any
) -> None:
    # Spark commits a batch only while planning the next one; acking only in commit() stalled
    # after 100 of these 300 messages for good (docs/contracts/spark.md#ack-protocol): a stall,
    # not a total time, is the failure.
    queue = amqp.queue()
    ids = amqp.publish(queue, 300)
    batches: list[tuple[int, list[str]]] = []
    frame = hutch_stream(spark, amqp, queue, maxMessagesPerBatch=BATCH, prefetch=BATCH)
    query = start(frame, collect_into(batches), tmp_path / "checkpoint")
    try:
        wait_count(
            "300 rows", lambda: sum(len(rows) for _, rows in batches), 300, query, "rows collected"
        )
        # An idle moment between triggers; on a loaded 2-core CI machine 10 s was too short.
        waiter("an idle trigger", lambda: query.status["isTriggerActive"] is False, 30)
    finally:
        query.stop()
    seen = [message_id for _, rows in batches for message_id in rows]
    assert sorted(seen) == sorted(ids)
    assert max(len(rows) for _, rows in batches) <= BATCH
    waiter("our consumer gone", lambda: amqp.consumers(queue) == 0, 15)
    amqp.left_after_stop(queue, set(ids), BATCH)  # acks kept up: at most the last batch left


def test_failing_sink_loses_nothing_and_duplicates_at_most_one_batch(
    spark: Any, amqp: Any, tmp_path: Path, waiter: Any
) -> None:
    queue = amqp.queue()
    ids = amqp.publish(queue, 500)
    checkpoint = tmp_path / "checkpoint"
    first: list[tuple[int, list[str]]] = []
    query = start(
        hutch_stream(spark, amqp, queue, maxMessagesPerBatch=BATCH),
        collect_into(first, fail_at=2),
        checkpoint,
    )
    wait_ended("the failed batch 2", query, lambda: len(first), "batches collected")
    with pytest.raises(Exception, match="sink failed on batch 2"):
        query.awaitTermination()
    committed = sum(len(rows) for batch_id, rows in first if batch_id < 2)
    waiter("our consumer gone", lambda: amqp.consumers(queue) == 0, 15)
    assert amqp.ready(queue) == 500 - committed  # nothing stays unacked after the failure

    second: list[tuple[int, list[str]]] = []
    query = start(
        hutch_stream(spark, amqp, queue, maxMessagesPerBatch=BATCH),
        collect_into(second),
        checkpoint,
    )
    try:
        wait_every(
            "every message",
            set(ids),
            lambda: (m for _, rows in first + second for m in rows),
            query,
        )
    finally:
        query.stop()
    assert [rows for batch_id, rows in second if batch_id == 2] == [[]]  # replays empty
    seen = [m for _, rows in first + second for m in rows]
    assert set(seen) == set(ids)
    assert len(seen) - len(set(seen)) <= BATCH


def test_available_now_drains_the_queue_and_stops(
    spark: Any, amqp: Any, tmp_path: Path, waiter: Any
) -> None:
    queue = amqp.queue()
    ids = amqp.publish(queue, 250)
    batches: list[tuple[int, list[str]]] = []
    frame = hutch_stream(spark, amqp, queue, maxMessagesPerBatch=BATCH)
    query = start(frame, collect_into(batches), tmp_path / "checkpoint", availableNow=True)
    wait_ended("the drained queue's end", query, lambda: len(batches), "batches collected")
    query.awaitTermination()
    assert query.exception() is None
    assert sorted(m for _, rows in batches for m in rows) == sorted(ids)
    waiter("our consumer gone", lambda: amqp.consumers(queue) == 0, 15)
    assert amqp.ready(queue) == 0


def test_missing_queue_fails_the_query_naming_it(spark: Any, amqp: Any, tmp_path: Path) -> None:
    frame = hutch_stream(spark, amqp, "no-such-queue-here")
    query = start(frame, collect_into([]), tmp_path / "checkpoint")
    with pytest.raises(Exception, match="queue 'no-such-queue-here' does not exist"):
        query.awaitTermination(60)


def test_batch_read_peeks_or_drains(spark: Any, amqp: Any, waiter: Any) -> None:
    queue = amqp.queue()
    amqp.publish(queue, 20, with_ids=False)
    amqp.publish(queue, 10, start=20)

    def read(mode: str) -> list[Any]:
        reader = spark.read.format("hutch").option("uri", amqp.url).option("queue", queue)
        rows: list[Any] = (
            reader.option("maxMessages", "25").option("batchMode", mode).load().collect()
        )
        return rows

    peeked = read("peek")
    assert len(peeked) == 25
    assert [row.seq for row in peeked] == list(range(1, 26))
    assert json.loads(peeked[0].body) == {"n": 0}
    assert dict(peeked[0].headers) == {"n": "0", "flag": "True", "raw": "/wA="}
    assert peeked[0].content_type == "application/json"
    # No id published, none delivered: neither broker stamps one (hutch-broker only when
    # configured with stamp_message_id = true).
    assert [row.message_id for row in peeked] == [None] * 20 + [f"m-{n}" for n in range(20, 25)]
    waiter("the peek re-queued", lambda: amqp.consumers(queue) == 0 and amqp.ready(queue) == 30, 15)

    drained = read("drain")
    assert len(drained) == 25
    assert all(row.redelivered for row in drained)
    assert [row.message_id for row in drained] == [row.message_id for row in peeked]
    waiter("the drain acked", lambda: amqp.consumers(queue) == 0 and amqp.ready(queue) == 5, 15)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"queue": "q", "maxMessagesPerBatch": "0"}, "'maxMessagesPerBatch' = 0 is out of range"),
        (
            {"queue": "q", "maxMessagesPerBatch": "500", "prefetch": "100"},
            "must be >= maxMessagesPerBatch",
        ),
        ({"queue": "q", "maxMessagePerBatch": "10"}, "did you mean 'maxMessagesPerBatch'?"),
        ({"prefetch": "10"}, "'queue' is required"),
    ],
)
def test_malformed_options_fail_when_the_stream_is_defined(
    spark: Any, options: dict[str, str], message: str
) -> None:
    with pytest.raises(Exception, match="HutchOptionError") as caught:
        spark.readStream.format("hutch").options(**options).load()
    assert message in str(caught.value)


@pytest.mark.parametrize("broker", ["hutch"], indirect=True)  # restart() is hutch-broker's
@pytest.mark.own_broker  # it restarts the broker
def test_broker_restart_mid_stream_reconnects_and_loses_nothing(
    spark: Any, broker: Any, amqp: Any, tmp_path: Path, waiter: Any
) -> None:
    # The consumer reconnects on a new channel (a new epoch); acks for the old channel's tags
    # must be dropped, never sent (406 would close the new channel), and nothing may be lost.
    queue = amqp.queue()
    ids = amqp.publish(queue, 300)
    amqp.close()
    batches: list[tuple[int, list[str]]] = []
    restarts: list[int] = []
    write = collect_into(batches, then=restart_once_after(broker, 1, restarts))
    query = start(
        hutch_stream(spark, amqp, queue, maxMessagesPerBatch=BATCH), write, tmp_path / "ck"
    )
    try:
        wait_every(
            "every message", set(ids), lambda: (m for _, rows in batches for m in rows), query
        )
    finally:
        query.stop()
    seen = [m for _, rows in batches for m in rows]
    assert restarts == [1]
    assert len(seen) - len(set(seen)) <= 2 * BATCH


@pytest.mark.parametrize("broker", ["hutch"], indirect=True)  # restart() is hutch-broker's
@pytest.mark.own_broker  # it restarts the broker
def test_available_now_drains_the_whole_queue_across_a_broker_restart(
    spark: Any, broker: Any, amqp: Any, tmp_path: Path, waiter: Any
) -> None:
    # availableNow ends the query at the first batch that finds nothing. Before the fix, the
    # planning after a restart found an empty buffer while the consumer was still reconnecting
    # (the query ended with most of the queue left), and the budget measured at the start
    # had already been spent on messages the restart re-queued.
    queue = amqp.queue()
    ids = amqp.publish(queue, 300)
    amqp.close()
    batches: list[tuple[int, list[str]]] = []
    restarts: list[int] = []
    write = collect_into(batches, then=restart_once_after(broker, 1, restarts))
    frame = hutch_stream(spark, amqp, queue, maxMessagesPerBatch=50)
    query = start(frame, write, tmp_path / "ck", availableNow=True)
    wait_ended("the drained queue's end", query, lambda: len(batches), "batches collected")
    query.awaitTermination()
    assert query.exception() is None
    assert restarts == [1]
    seen = [m for _, rows in batches for m in rows]
    assert set(seen) == set(ids)
    assert len(seen) - len(set(seen)) <= 2 * 50  # the batch in flight (and one acked just before)
    listed = waiter(
        "our consumer gone",
        lambda: (q := amqp.management(f"/api/queues/%2F/{queue}"))["consumers"] == 0 and q,
        15,
    )
    assert (listed["messages_ready"], listed["messages_unacknowledged"]) == (0, 0)
