"""Celery with ``task_queue_max_priority``, as its users configure it (issue 14 proof).

Why: a Celery worker with ``task_queue_max_priority`` declares its queue with ``x-max-priority``;
hutch-broker refused that argument and the worker died at start-up. Here the tasks are queued
first, with priorities in shuffled order, then one worker (one thread, prefetch 1) runs them: it
must run the highest priority first, on both brokers.
"""

import random

import pytest
from celery import Celery
from celery.contrib.testing.worker import start_worker
from hutch_demo.waiting import wait_for

pytestmark = [pytest.mark.rabbitmq, pytest.mark.timeout(120)]


def test_celery_worker_runs_tasks_by_priority(target, prompt_stop):
    queue = target.name("celery")
    app = prompt_stop(Celery(queue, broker=target.broker.amqp_url, set_as_current=False))
    app.conf.update(
        task_default_queue=queue,
        task_default_exchange=queue,
        task_default_routing_key=queue,
        task_queue_max_priority=10,
        task_default_priority=5,
        worker_prefetch_multiplier=1,
        task_acks_late=True,
        worker_enable_remote_control=False,
        worker_send_task_events=False,
        broker_connection_retry_on_startup=False,
    )
    ran: list[int] = []

    @app.task(name=f"{queue}.record")
    def record(priority: int) -> None:
        ran.append(priority)

    priorities = list(range(10))
    random.Random(14).shuffle(priorities)
    for priority in priorities:
        record.apply_async((priority,), priority=priority)
    assert target.api.queue(queue)["arguments"] == {"x-max-priority": 10}
    channel = target.channel(confirm=False)
    wait_for(
        lambda: channel.queue_declare(queue, passive=True).method.message_count == 10, timeout=10
    )

    # One thread, prefetch 1: each task is taken only after the previous one is acked. The
    # worker stops within 0.2 s of the block's end (prompt_stop), not after its 10 s poll.
    with start_worker(
        app, pool="threads", concurrency=1, perform_ping_check=False, shutdown_timeout=30
    ):
        wait_for(lambda: len(ran) == 10, timeout=30)
    assert ran == sorted(priorities, reverse=True)
