"""The hutch-spark image's Python processes import pyspark without compiling it (#28).

Why: Spark starts a Python process per streaming query (the source's runner), and the image's
executors start worker daemons, all with ``$SPARK_HOME/python/lib/pyspark.zip`` and py4j's zip
first on their PYTHONPATH (Spark's ``PythonUtils.sparkPythonPath``, merged first by
``PythonWorkerFactory``). The zips the pyspark wheel ships hold sources only, so each process
compiled what it imported; the image now puts bytecode inside them (spark/jobs/Dockerfile,
``hutch_spark.zipbytecode``). tests/spark/test_zipbytecode.py shows the rewrite on small zips;
this checks the image as built for the node, in a Pod: a fresh interpreter with Spark's
PYTHONPATH imports what the runner and the workers import (and hutch_spark's stream source,
which unpickling the reader brings in) and counts its source compiles, which must be none. The
same imports from copies of the zips without their bytecode (the wheel's zips) are the control:
they compile pyspark, so the probe can see the difference. The CPU of each import is printed
(process CPU, not wall time: other engineers load the machine), not asserted.
"""

from __future__ import annotations

import json
import statistics
import sys
from typing import Any

import pytest
from hutch_demo import waiting

# Runs in the Pod as the image's python3. The child imports the modules named on its command
# line with the builtin compile counted for source files (zipimport and the path finder compile
# through it).
PROBE = r"""
import glob, json, os, resource, subprocess, sys, tempfile, zipfile

CHILD = '''
import builtins, importlib, json, sys
compiled = []
real = builtins.compile
def counting(source, filename, *args, **kwargs):
    if str(filename).endswith(".py"):  # not typing's '<string>' annotations
        compiled.append(str(filename))
    return real(source, filename, *args, **kwargs)
builtins.compile = counting
for name in sys.argv[1:]:
    importlib.import_module(name)
builtins.compile = real
print(json.dumps({"compiled": compiled, "pyspark": sys.modules["pyspark"].__file__}))
'''
MODULES = [
    "pyspark.sql.streaming.python_streaming_source_runner",
    "pyspark.daemon",
    "pyspark.worker",
    "hutch_spark.streamsource",
]
lib = os.path.join(os.environ["SPARK_HOME"], "python", "lib")
spark_path = [os.path.join(lib, "pyspark.zip"), *glob.glob(os.path.join(lib, "py4j-*-src.zip"))]


def cpu():
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def imports(path):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(path)}
    began = cpu()
    out = subprocess.run([sys.executable, "-c", CHILD, *MODULES], env=env, check=True,
                         capture_output=True, text=True).stdout
    return {**json.loads(out), "cpu_s": round(cpu() - began, 3)}


plain = []
for archive in spark_path:
    copy = os.path.join(tempfile.mkdtemp(), os.path.basename(archive))
    with zipfile.ZipFile(archive) as source, zipfile.ZipFile(copy, "w") as target:
        for info in source.infolist():
            if not info.filename.endswith(".pyc"):
                target.writestr(info, source.read(info))
    plain.append(copy)
rounds = [{"image": imports(spark_path), "sources": imports(plain)} for _ in range(3)]
print(json.dumps({"path": spark_path, "rounds": rounds}))
"""


@pytest.mark.k8s
@pytest.mark.timeout(1500)  # a cold hutch-spark build is minutes
def test_sparks_python_processes_import_pyspark_from_bytecode(
    node: Any, spark_image: str, k8s_namespace: str
) -> None:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "zip-bytecode"},
        "spec": {
            "restartPolicy": "Never",
            "containers": [
                {
                    "name": "probe",
                    "image": spark_image,
                    "imagePullPolicy": "Never",
                    "args": ["python3", "-c", PROBE],
                }
            ],
        },
    }
    node.create(f"/api/v1/namespaces/{k8s_namespace}/pods", pod)

    def finished() -> dict[str, Any] | None:
        _, got = node.api("GET", f"/api/v1/namespaces/{k8s_namespace}/pods/zip-bytecode")
        statuses = got.get("status", {}).get("containerStatuses") or []
        return statuses[0]["state"].get("terminated") if statuses else None

    done = waiting.wait_for(finished, timeout=300, interval=0.5, what="the probe to end")
    log = node.kubectl("logs", "-n", k8s_namespace, "zip-bytecode").stdout
    assert done["exitCode"] == 0, log[-3000:]
    found = json.loads(log.strip().splitlines()[-1])
    home_zip = "/opt/spark/python/lib/pyspark.zip"
    assert found["path"][0] == home_zip
    assert found["path"][1].startswith("/opt/spark/python/lib/py4j-"), found["path"]
    for measured in found["rounds"]:
        assert measured["image"]["pyspark"] == f"{home_zip}/pyspark/__init__.pyc"
        assert measured["image"]["compiled"] == []
        # The control: the wheel's zips make the same imports compile pyspark (and py4j).
        compiled = measured["sources"]["compiled"]
        assert any(name.endswith("/pyspark.zip/pyspark/worker.py") for name in compiled), compiled
        assert any("/py4j-" in name for name in compiled), compiled[:5]
    image = [r["image"]["cpu_s"] for r in found["rounds"]]
    sources = [r["sources"]["cpu_s"] for r in found["rounds"]]
    sys.stderr.write(
        f"  the runner's and the workers' imports: {statistics.median(image):.2f} s of CPU with the image's "
        f"bytecode {image}, {statistics.median(sources):.2f} s from sources {sources}; "
        f"{len(found['rounds'][0]['sources']['compiled'])} files compiled from sources\n"
    )
