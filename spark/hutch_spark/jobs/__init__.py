"""Hutch's own Spark jobs, runnable as `python -m hutch_spark.jobs.<name>` or via spark-submit.

Each job is a module with `main(argv)`; spark/jobs/ holds the thin files that spark-submit and
the SparkApplication point at (`local:///opt/hutch/jobs/<name>.py`).
"""
