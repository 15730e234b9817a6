"""The Spark job over a queue the operator declared: every event counted once after dedupe.

The job (``python -m hutch_spark.jobs.windowed_counts``) runs as a child process against the
Broker ``hutch``; events carry explicit message ids and some are published twice. Its Parquet
output is read through the file sink's commit log. The test SIGKILLs the driver's whole
process group half way and resumes from the checkpoint: the broker re-queues what was unacked,
the dedupe state drops what was already counted, and the totals must still be exact.

One job, not two (issue 29): an undisturbed run proved nothing the resumed run does not. Its
checks are all here: every message confirmed at publish, the run's exit 0, the counts per
window exactly the unique events, the queue empty with nothing unacked, and one ack per
published message (the kill must not lose an ack nor make the broker count one twice).
"""

from __future__ import annotations

import time

import pytest
from hutch_demo import chain, clusters, launchers, pipeline, summaries, waiting

pytestmark = [pytest.mark.e2e, pytest.mark.spark, pytest.mark.timeout(600)]

JOB_TIMEOUT = 420


def declare_queue(hutch: chain.Chain, name: str) -> None:
    hutch.apply_topology(
        clusters.manifest(clusters.cr("Queue", name, {"brokerRef": {"name": "hutch"}}))
    )


def wait_exit(child: launchers.Child, timeout: float = JOB_TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    while child.running and time.monotonic() < deadline:
        time.sleep(0.5)
    if child.running:
        child.stop()
        pytest.fail(f"the job did not finish in {timeout}s:\n{child.log_tail()}")
    assert child.proc.returncode == 0, child.log_tail()


def assert_exactly_once(hutch: chain.Chain, run: pipeline.JobRun, stream: pipeline.Stream) -> None:
    counted = pipeline.counted(pipeline.read_results(run.output))
    assert counted == stream.expected_counts()
    assert sum(counted.values()) == stream.unique_counted
    listed = hutch.management().queue(run.queue)
    assert (listed["messages_ready"], listed["messages_unacknowledged"]) == (0, 0)


def test_job_counts_every_event_once_after_its_driver_is_killed(
    hutch: chain.Chain, unique: str
) -> None:
    name = f"killed-{unique}"
    declare_queue(hutch, name)
    stream = pipeline.make_stream(2000, prefix=unique, expire_every=0)
    pipeline.publish(hutch.endpoint, stream, exchange="", routing_key=name)
    assert stream.published == 2000 + stream.duplicates + 1
    total = stream.published

    run = hutch.job(name, name, max_messages_per_batch=200)
    driver = hutch.start_job(run, available_now=False)
    mgmt = hutch.management()
    acked = waiting.wait_for(
        lambda: summaries.acked(mgmt, name) if driver.running else -1,
        lambda n: n < 0 or n >= total * 0.4,
        timeout=JOB_TIMEOUT,
        interval=0.2,
        what="the job half way",
    )
    assert acked >= 0, f"the job exited early:\n{driver.log_tail()}"
    driver.kill()  # SIGKILL to the driver's process group: JVM and Python workers alike
    assert run.committed_batches() >= 1
    assert summaries.acked(mgmt, name) < total  # the kill came before the end

    wait_exit(hutch.start_job(run, available_now=True))
    assert_exactly_once(hutch, run, stream)
    stats = hutch.management().queue(name)["message_stats"]
    assert stats["redeliver"] > 0  # the restart really re-consumed what the kill left unacked
    assert summaries.acked(hutch.management(), name) == stream.published  # each acked once
