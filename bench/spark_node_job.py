"""The Spark source benchmark's driver program, run in a driver Pod on the real node.

Why: bench/spark_bench.py measures the source with the driver on the host in local mode; a
user's job runs as a driver Pod with executor Pods, its broker reached through a Service. This
program is submitted by bench/spark_node_bench.py with spark-submit in cluster mode and runs the
same phases (bench/spark_phases.py, copied beside it on the job's volume) against the Broker's
Service: a discarded warm-up, then ``--repeat`` rounds in one Spark session. The broker is the
operator's Broker Pod; its address and credentials come from the environment the submission
sets (HUTCH_AMQP_URI, and HUTCH_AMQP_USERNAME/PASSWORD from the Broker's Secret), never from
arguments. It writes the samples as JSON and a progress line per phase for the host to show.
"""

from __future__ import annotations

import argparse
import json
import os
import time
import urllib.parse
from typing import Any

import hutch_spark
from hutch_spark import checkpoints
from pyspark.sql import SparkSession
from spark_phases import BODY, add_arguments, measure_phases, warm_up_size


def broker_url() -> str:
    """HUTCH_AMQP_URI with the Secret's credentials in it (what pika's URLParameters reads)."""
    parts = urllib.parse.urlsplit(os.environ["HUTCH_AMQP_URI"])
    user = urllib.parse.quote(os.environ["HUTCH_AMQP_USERNAME"], safe="")
    password = urllib.parse.quote(os.environ["HUTCH_AMQP_PASSWORD"], safe="")
    netloc = f"{user}:{password}@{parts.netloc}"
    return urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, parts.query, ""))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_arguments(parser, output_required=True)
    args = parser.parse_args()
    work = args.output.parent / "work"
    work.mkdir(parents=True, exist_ok=True)
    progress = args.output.with_name("progress.txt")

    def say(text: str) -> None:
        with progress.open("a") as out:
            out.write(f"{time.strftime('%H:%M:%S')} {text}\n")

    spark = SparkSession.builder.getOrCreate()  # master and confs from spark-submit
    spark.sparkContext.setLogLevel("ERROR")
    hutch_spark.register(spark)
    checkpoints.configure(spark, str(work))  # as windowed_counts does (hutch_spark.checkpoints)
    url = broker_url()
    warm = warm_up_size(args)
    say(f"warm-up ({warm} messages, discarded)")
    measure_phases(spark, url, warm, work, latency_seconds=None, partitions=args.partitions)
    samples: list[dict[str, Any]] = []
    for index in range(args.repeat):
        say(f"round {index + 1}/{args.repeat}")
        sample = measure_phases(
            spark,
            url,
            args.messages,
            work,
            latency_seconds=args.latency_seconds,
            latency_rate=args.latency_rate,
            partitions=args.partitions,
        )
        sample["round"] = index
        sample["broker"] = "hutch"
        samples.append(sample)
    spark.stop()
    results = {
        "messages": args.messages,
        "body_bytes": len(BODY),
        "repeat": args.repeat,
        "partitions": args.partitions,
        "samples": samples,
    }
    args.output.write_text(json.dumps(results, indent=2))
    say("done")


if __name__ == "__main__":
    main()
