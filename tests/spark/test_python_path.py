"""Local Spark's Python processes import the venv's installed pyspark, not Spark's zip.

Why: scripts/bootstrap.sh removes pyspark.zip and py4j's zip from the dev venv's pyspark, as the
hutch-spark image does (spark/jobs/Dockerfile says why: a zip on the path cost each streaming
query's runner 0.17 s at start). Spark still names both zips first on its Python processes'
PYTHONPATH; this checks, in a real Spark worker, that those entries name nothing, that pyspark
came from site-packages, and that no module the worker loaded came from an archive. The node
tier checks the image the same way (tests/localkube/test_spark_python_path_node.py).
"""

from __future__ import annotations

import os
from typing import Any

import pytest

pytestmark = pytest.mark.spark


def _worker_view(_: int) -> dict[str, Any]:
    import sys  # in the worker: what Spark gave its process

    import pyspark

    return {
        "path": list(sys.path),
        "zips": {entry: os.path.exists(entry) for entry in sys.path if entry.endswith(".zip")},
        "pyspark": pyspark.__file__,
        "archived": sorted(
            name
            for name, module in list(sys.modules.items())
            if ".zip" in str(getattr(module, "__file__", ""))
        ),
    }


def test_a_spark_worker_imports_pyspark_from_site_packages(spark: Any) -> None:
    (seen,) = spark.sparkContext.parallelize([0], 1).map(_worker_view).collect()
    named = [entry for entry in seen["zips"] if entry.endswith("/pyspark.zip")]
    assert named, seen["path"]  # Spark still names the zip first on the path ...
    assert not any(seen["zips"].values()), seen["zips"]  # ... and no zip there exists
    assert seen["pyspark"].endswith(os.path.join("site-packages", "pyspark", "__init__.py"))
    assert seen["archived"] == []
