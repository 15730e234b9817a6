"""A Spark job of your own: counts a queue's JSON events by their "type" field.

Not the bundled windowed_counts: this file is what docs/spark.md ("Run your own job") puts into
a ConfigMap and runs as driver and executor Pods of the hutch-spark image, in any namespace:

    kubectl create configmap type-counts-job -n team-spark \\
        --from-file=job.py=examples/spark-type-counts.py
    spark-submit ... local:///opt/hutch/user/job.py \\
        --queue orders-eu --checkpoint /data/type-counts/checkpoint \\
        --output /data/type-counts/output

It drains the queue once (availableNow) with the `hutch` source and writes each micro-batch's
counts to ``<output>/batch=<id>/`` as Parquet, columns ``type`` and ``count``. Writing per
batch id with overwrite makes a replayed batch replace its own files instead of adding to
them; the total per type is the sum over the batches. The broker's address and the job's
credentials come from the environment (HUTCH_AMQP_URI, HUTCH_AMQP_USERNAME,
HUTCH_AMQP_PASSWORD), which spark-submit's confs give the driver Pod.
"""

from __future__ import annotations

import argparse
from typing import Any

import hutch_spark
from hutch_spark import checkpoints
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F  # noqa: N812 - PySpark's own convention


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queue", required=True)
    parser.add_argument("--checkpoint", required=True, help="a directory on the volume")
    parser.add_argument("--output", required=True, help="a directory on the volume")
    parser.add_argument("--uri", help="default: HUTCH_AMQP_URI")
    parser.add_argument("--max-messages-per-batch", type=int, default=1000)
    return parser.parse_args(argv)


def start(spark: SparkSession, args: argparse.Namespace) -> Any:
    """Starts the query; it stops by itself once the queue's depth at the start is read."""
    hutch_spark.register(spark)
    checkpoints.configure(spark, args.checkpoint)
    reader = spark.readStream.format("hutch").option("queue", args.queue)
    reader = reader.option("maxMessagesPerBatch", str(args.max_messages_per_batch))
    if args.uri:
        reader = reader.option("uri", args.uri)
    events = reader.load()
    types = events.select(F.get_json_object(F.col("body").cast("string"), "$.type").alias("type"))

    def write(batch: DataFrame, batch_id: int) -> None:
        counts = batch.groupBy("type").count()
        counts.write.mode("overwrite").parquet(f"{args.output}/batch={batch_id}")

    return (
        types.writeStream.foreachBatch(write)
        .option("checkpointLocation", args.checkpoint)
        .trigger(availableNow=True)
        .start()
    )


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    spark = SparkSession.builder.appName("type-counts").getOrCreate()
    start(spark, args).awaitTermination()
    spark.stop()


if __name__ == "__main__":
    main()
