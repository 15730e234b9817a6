"""windowed_counts: per-window event counts from a queue of JSON events.

Why this job exists: it is the realistic end-to-end use of the `hutch` source that the chart
deploys and the docs walk through. It consumes a queue, parses JSON events
(`{"type": ..., "user": ..., "value": ..., "ts": ...}`), drops duplicates on `message_id`
within the watermark (the source is at-least-once), counts events per event-time window and
type, and appends each closed window either to Parquet (default) or to an exchange, where the
message id `<type>@<window start>` lets consumers upsert idempotently.

    python -m hutch_spark.jobs.windowed_counts --queue events --checkpoint /tmp/ckpt \\
        --output /tmp/counts            # Parquet; master local[*] unless spark-submit set one

The checkpoint location is required: it is what makes a restart resume where it stopped.
Under spark-submit (or the SparkApplication) the master comes from Spark's configuration;
run directly, Spark's default master is local[*].
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Sequence
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F  # noqa: N812 - the conventional alias
from pyspark.sql.streaming.query import StreamingQuery
from pyspark.sql.types import DoubleType, StringType, StructField, StructType

import hutch_spark
from hutch_spark import checkpoints, sessionconf

log = logging.getLogger(__name__)

EVENT_SCHEMA = StructType(
    [
        StructField("type", StringType()),
        StructField("user", StringType()),
        StructField("value", DoubleType()),
        StructField("ts", StringType()),
    ]
)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m hutch_spark.jobs.windowed_counts")
    parser.add_argument("--queue", required=True, help="the queue to consume")
    parser.add_argument("--checkpoint", required=True, help="checkpoint location (a PVC path)")
    parser.add_argument("--uri", help="AMQP URI (default: env HUTCH_AMQP_URI, then localhost)")
    parser.add_argument("--sink", choices=("parquet", "exchange"), default="parquet")
    parser.add_argument("--output", help="Parquet output directory (sink=parquet)")
    parser.add_argument("--exchange", help="exchange to publish results to (sink=exchange)")
    parser.add_argument("--routing-key", default="", help="routing key of published results")
    parser.add_argument("--window", default="1 minute", help="event-time window length")
    parser.add_argument("--watermark", default="2 minutes", help="allowed lateness")
    parser.add_argument("--trigger", default="10 seconds", help="micro-batch interval")
    parser.add_argument("--available-now", action="store_true", help="drain the queue, then stop")
    parser.add_argument("--max-messages-per-batch", type=int, default=1000)
    parser.add_argument("--durable-batches", action="store_true", help="replay batches exactly")
    parser.add_argument("--master", help="Spark master (default: spark-submit's, else local[*])")
    args = parser.parse_args(argv)
    if args.sink == "parquet" and not args.output:
        parser.error("--output is required with --sink parquet")
    if args.sink == "exchange" and args.exchange is None:
        parser.error("--exchange is required with --sink exchange ('' for the default exchange)")
    return args


def session(master: str | None, checkpoint: str) -> SparkSession:
    """A SparkSession on --master, else on the master spark-submit (or PYSPARK_SUBMIT_ARGS) set.

    A checkpoint on a local disk or PVC gets the FileSystem-based checkpoint manager unless one
    was configured (hutch_spark.checkpoints: Spark's default forks processes on every batch).

    The master is never forced otherwise: a builder `.master()` would override spark-submit's
    (`k8s://...` in cluster mode), and without one Spark itself defaults to local[*]. (The
    Python `SparkConf()` cannot tell: it does not see spark-submit's settings before the JVM
    starts.)
    """
    # UTC: result message ids and JSON carry window starts as ...Z timestamps.
    builder = (
        SparkSession.builder.appName("hutch-windowed-counts")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.ui.showConsoleProgress", "false")  # stage bars flood job logs
    )
    if master is not None:
        builder = builder.master(master)
    spark = builder.getOrCreate()
    # Spark's default of 200 shuffle partitions makes every micro-batch of this small
    # aggregation run 200 tasks per stage; honour a value the user set, else use 8.
    sessionconf.set_default(spark, "spark.sql.shuffle.partitions", "8")
    checkpoints.configure(spark, checkpoint)
    hutch_spark.register(spark)
    return spark


def windowed_counts(messages: DataFrame, *, window: str, watermark: str) -> DataFrame:
    """Counts, value sums and distinct users per (window, type); malformed events dropped."""
    event_time: Column = F.coalesce(F.to_timestamp(F.col("event.ts")), F.col("received_at"))
    # Null ids (brokers that do not stamp one) must not collapse into one "duplicate".
    dedupe_key = F.coalesce(F.col("message_id"), F.concat_ws("#", F.lit("seq"), F.col("seq")))
    events = (
        messages.select(
            "seq",
            "message_id",
            "received_at",
            F.from_json(F.col("body").cast("string"), EVENT_SCHEMA).alias("event"),
        )
        .where(F.col("event.type").isNotNull())
        .select(
            dedupe_key.alias("dedupe_key"),
            event_time.alias("event_time"),
            F.col("event.type").alias("type"),
            F.col("event.user").alias("user"),
            F.col("event.value").alias("value"),
        )
        .withWatermark("event_time", watermark)
        .dropDuplicatesWithinWatermark(["dedupe_key"])
    )
    return (
        events.groupBy(F.window("event_time", window).alias("window"), "type")
        .agg(
            F.count(F.lit(1)).alias("events"),
            F.sum("value").alias("value_sum"),
            F.approx_count_distinct("user").alias("users"),
        )
        .select(
            F.col("window.start").alias("window_start"),
            F.col("window.end").alias("window_end"),
            "type",
            "events",
            "value_sum",
            "users",
        )
    )


def as_messages(counts: DataFrame) -> DataFrame:
    """Result rows as sink rows: a JSON body and an idempotency key as message_id."""
    return counts.select(
        F.to_json(F.struct(*[F.col(name) for name in counts.columns])).alias("body"),
        F.concat_ws(
            "@", F.col("type"), F.date_format("window_start", "yyyy-MM-dd'T'HH:mm:ss'Z'")
        ).alias("message_id"),
        F.lit("application/json").alias("content_type"),
    )


def start(spark: SparkSession, args: argparse.Namespace) -> StreamingQuery:
    """Defines and starts the query described by the parsed arguments."""
    reader = (
        spark.readStream.format("hutch")
        .option("queue", args.queue)
        .option("maxMessagesPerBatch", str(args.max_messages_per_batch))
    )
    if args.uri:
        reader = reader.option("uri", args.uri)
    if args.durable_batches:
        reader = reader.option("durableBatches", "true").option(
            "batchLogDir", f"{args.checkpoint.rstrip('/')}/hutch-batches"
        )
    counts = windowed_counts(reader.load(), window=args.window, watermark=args.watermark)
    return sink(counts, args)


def sink(counts: DataFrame, args: argparse.Namespace) -> StreamingQuery:
    """Starts writing closed windows to the sink, checkpoint and trigger the arguments name.

    Its own function so that the image's class-data recording (``hutch_spark.training``)
    drives exactly this sink over a stand-in source.
    """
    if args.sink == "parquet":
        writer = counts.writeStream.format("parquet").option("path", args.output)
    else:
        writer = as_messages(counts).writeStream.format("hutch").option("exchange", args.exchange)
        writer = writer.option("routingKey", args.routing_key)
        if args.uri:
            writer = writer.option("uri", args.uri)
    writer = writer.outputMode("append").option("checkpointLocation", args.checkpoint)
    trigger: dict[str, Any] = (
        {"availableNow": True} if args.available_now else {"processingTime": args.trigger}
    )
    return writer.trigger(**trigger).queryName("hutch_windowed_counts").start()


def main(argv: Sequence[str] | None = None) -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    args = parse_args(argv)
    spark = session(args.master, args.checkpoint)
    query = start(spark, args)
    log.info("started %s (id %s), checkpoint %s", query.name, query.id, args.checkpoint)
    try:
        query.awaitTermination()
    finally:
        query.stop()
        spark.stop()


if __name__ == "__main__":
    main()
