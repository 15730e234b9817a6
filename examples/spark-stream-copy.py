"""A Spark job of your own over stream queues: each message to Parquet, exactly once.

The stream source's job (docs/spark.md, "Read stream queues"): the driver only plans offsets
from the management API, the executors read their slices of each stream on their own
connections, and Spark's file sink commits each micro-batch's files in its ``_spark_metadata``
log. A batch replayed after an executor or the driver died reads the same offsets, hence the
same messages, so the committed output holds each message once with no dedupe step. Like
examples/spark-type-counts.py, it runs from a ConfigMap mounted in the driver and executor Pods:

    kubectl create configmap stream-copy-job -n team-spark \\
        --from-file=job.py=examples/spark-stream-copy.py
    spark-submit ... local:///opt/hutch/user/job.py --streams orders-0,orders-1 \\
        --checkpoint /data/stream-copy/checkpoint --output /data/stream-copy/output

It reads from the streams' first offsets (a new checkpoint) or from its checkpoint, up to what
the streams held when it started (availableNow), ``--max-offsets-per-trigger`` offsets a batch
split into ``--num-partitions`` slices per stream, and stops; with ``--processing-time`` it
keeps running, a micro-batch at most every that interval, until it is stopped (a job that copies
a stream as it grows). Columns written: ``stream``,
``offset``, ``message_id`` and ``body``. The broker's address comes from HUTCH_AMQP_URI on the
driver; the credentials (HUTCH_AMQP_USERNAME, HUTCH_AMQP_PASSWORD) are needed on the driver (the
management API) and on the executors (they consume).
"""

from __future__ import annotations

import argparse
from typing import Any

import hutch_spark
from hutch_spark import checkpoints
from pyspark.sql import SparkSession


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", required=True, help="a comma list of stream queues")
    parser.add_argument("--checkpoint", required=True, help="a directory on the volume")
    parser.add_argument("--output", required=True, help="a directory on the volume")
    parser.add_argument("--uri", help="default: HUTCH_AMQP_URI")
    parser.add_argument("--management-uri", help="default: http://<uri's host>:15672")
    parser.add_argument("--max-offsets-per-trigger", type=int, default=10000)
    parser.add_argument("--num-partitions", type=int, default=2)
    parser.add_argument(
        "--processing-time",
        help="run until stopped, a batch at most this often (e.g. '1 second'); "
        "default: stop once what the streams held at the start is read (availableNow)",
    )
    return parser.parse_args(argv)


def start(spark: SparkSession, args: argparse.Namespace) -> Any:
    """Starts the query; without ``--processing-time`` it stops by itself once what the
    streams held at the start is read."""
    hutch_spark.register(spark)
    checkpoints.configure(spark, args.checkpoint)
    reader = (
        spark.readStream.format("hutch")
        .option("streams", args.streams)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", str(args.max_offsets_per_trigger))
        .option("numPartitions", str(args.num_partitions))
    )
    if args.uri:
        reader = reader.option("uri", args.uri)
    if args.management_uri:
        reader = reader.option("managementUri", args.management_uri)
    rows = reader.load().select("stream", "offset", "message_id", "body")
    writer = (
        rows.writeStream.format("parquet")
        .option("path", args.output)
        .option("checkpointLocation", args.checkpoint)
    )
    if args.processing_time:
        return writer.trigger(processingTime=args.processing_time).start()
    return writer.trigger(availableNow=True).start()


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    spark = SparkSession.builder.appName("stream-copy").getOrCreate()
    start(spark, args).awaitTermination()
    spark.stop()


if __name__ == "__main__":
    main()
