"""Celery with ``task_default_queue_type = "quorum"``, as its users configure it (issue 14).

Why: Celery 5.5+ declares its queues as quorum queues with that one setting, and then must
not use a channel-wide prefetch (quorum queues refuse it with 540); it detects that from the
queue's arguments. The worker must start, run every task once and leave the queue empty, and
the queue must be a quorum queue, on both brokers.
"""

import pytest
from celery import Celery
from celery.contrib.testing.worker import start_worker
from hutch_demo.waiting import wait_for

pytestmark = [pytest.mark.rabbitmq, pytest.mark.timeout(120)]


def test_celery_worker_runs_tasks_from_a_quorum_queue(target, prompt_stop):
    queue = target.name("celery-qq")
    app = prompt_stop(Celery(queue, broker=target.broker.amqp_url, set_as_current=False))
    app.conf.update(
        task_default_queue=queue,
        task_default_exchange=queue,
        task_default_routing_key=queue,
        task_default_queue_type="quorum",
        worker_detect_quorum_queues=True,
        worker_prefetch_multiplier=2,
        task_acks_late=True,
        worker_enable_remote_control=False,
        worker_send_task_events=False,
        broker_connection_retry_on_startup=False,
    )
    ran: list[int] = []

    @app.task(name=f"{queue}.record")
    def record(number: int) -> None:
        ran.append(number)

    for number in range(20):
        record.delay(number)
    item = target.api.queue(queue)

    with start_worker(
        app, pool="threads", concurrency=2, perform_ping_check=False, shutdown_timeout=30
    ):
        wait_for(lambda: len(ran) == 20, timeout=30, what="all tasks run")
    channel = target.channel(confirm=False)

    assert (item["type"], item["durable"]) == ("quorum", True)
    assert item["arguments"] == {"x-queue-type": "quorum"}
    assert sorted(ran) == list(range(20))
    wait_for(
        lambda: channel.queue_declare(queue, durable=True, passive=True).method.message_count == 0
    )
