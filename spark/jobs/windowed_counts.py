"""spark-submit entry point of the windowed_counts job (`local:///opt/hutch/jobs/...` in the image).

spark-submit needs a file; the job itself lives in the installed package,
hutch_spark.jobs.windowed_counts, so `python -m` and spark-submit run the same code.
"""

from hutch_spark.jobs import windowed_counts

if __name__ == "__main__":
    windowed_counts.main()
