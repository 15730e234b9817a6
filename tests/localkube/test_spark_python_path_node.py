"""The hutch-spark image's Python processes import the installed pyspark, compiled, not a zip
(#28).

Why: Spark starts a Python process per streaming query (the source's runner), and the image's
executors start worker daemons, all with ``$SPARK_HOME/python/lib/pyspark.zip`` and py4j's zip
first on their PYTHONPATH (Spark's ``PythonUtils.sparkPythonPath``, merged first by
``PythonWorkerFactory``). Imported from the zip, a runner re-read its directory once per package
path at Spark's worker set-up (``importlib.invalidate_caches``): 0.17 s before a query's first
trigger. The image removes both zips (spark/jobs/Dockerfile), so those path entries name nothing
and pyspark comes from site-packages, with the bytecode pip wrote. This checks the image as
built for the node, in a Pod: the zips are gone, and a fresh interpreter with Spark's PYTHONPATH
(the two zips' paths and spark-core's jar, as Spark gives them) imports what the runner and the
workers import (and hutch_spark's stream source, which unpickling the reader brings in) from
site-packages, compiling nothing. The control: a module of the same interpreter's that has no
bytecode yet is counted when imported, so the counter sees compiles. The CPU of the imports and
of the cache invalidation is printed (process CPU, not wall time), not asserted.
"""

from __future__ import annotations

import json
import statistics
import sys
from typing import Any

import pytest
from hutch_demo import waiting

# Runs in the Pod as the image's python3. The child imports the modules named on its command
# line with the builtin compile counted for source files (the path finder compiles through it),
# then does what Spark's worker set-up does to the import caches, and says where every module
# it loaded came from.
PROBE = r"""
import glob, json, os, resource, subprocess, sys, tempfile

CHILD = '''
import builtins, importlib, json, sys, time
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
began = time.process_time()
importlib.invalidate_caches()
invalidate_s = time.process_time() - began
archived = sorted(
    name for name, module in list(sys.modules.items())
    if ".zip" in str(getattr(module, "__file__", "")) or ".jar" in str(getattr(module, "__file__", ""))
)
print(json.dumps({"compiled": compiled, "pyspark": sys.modules["pyspark"].__file__,
                  "archived": archived, "invalidate_s": round(invalidate_s, 4)}))
'''
MODULES = [
    "pyspark.sql.streaming.python_streaming_source_runner",
    "pyspark.daemon",
    "pyspark.worker",
    "hutch_spark.streamsource",
]
home = os.environ["SPARK_HOME"]
lib = os.path.join(home, "python", "lib")
spark_path = [  # py4j's zip by the name Spark 4.3 gives it (PythonUtils.PY4J_ZIP_NAME)
    os.path.join(lib, "pyspark.zip"),
    os.path.join(lib, "py4j-0.10.9.9-src.zip"),
    *glob.glob(os.path.join(home, "jars", "spark-core_*.jar")),
]
control = tempfile.mkdtemp()
with open(os.path.join(control, "probe_control.py"), "w") as out:
    out.write("VALUE = 1\n")


def cpu():
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def imports(path, modules):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(path)}
    began = cpu()
    out = subprocess.run([sys.executable, "-c", CHILD, *modules], env=env, check=True,
                         capture_output=True, text=True).stdout
    return {**json.loads(out), "cpu_s": round(cpu() - began, 3)}


rounds = [
    {"image": imports(spark_path, MODULES),
     "control": imports([control, *spark_path], ["probe_control", "pyspark"])}
    for _ in range(3)
]
print(json.dumps({"lib": sorted(os.listdir(lib)), "path": spark_path, "rounds": rounds,
                  "installed": os.path.realpath(home)}))
"""


@pytest.mark.k8s
@pytest.mark.timeout(1500)  # a cold hutch-spark build is minutes
def test_sparks_python_processes_import_the_installed_pyspark(
    node: Any, spark_image: str, k8s_namespace: str
) -> None:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "python-path"},
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
        _, got = node.api("GET", f"/api/v1/namespaces/{k8s_namespace}/pods/python-path")
        statuses = got.get("status", {}).get("containerStatuses") or []
        return statuses[0]["state"].get("terminated") if statuses else None

    done = waiting.wait_for(finished, timeout=300, interval=0.5, what="the probe to end")
    log = node.kubectl("logs", "-n", k8s_namespace, "python-path").stdout
    assert done["exitCode"] == 0, log[-3000:]
    found = json.loads(log.strip().splitlines()[-1])
    assert not [name for name in found["lib"] if name.endswith(".zip")], found["lib"]
    assert found["path"][2].startswith("/opt/spark/jars/spark-core_"), found["path"]
    for measured in found["rounds"]:
        image = measured["image"]
        # /opt/spark is the installed package (site-packages, or dist-packages on Debian)
        assert image["pyspark"] == f"{found['installed']}/__init__.py", image["pyspark"]
        assert image["archived"] == []
        assert image["compiled"] == []
        # The control: a module without bytecode is counted, next to the same pyspark.
        control = measured["control"]["compiled"]
        assert any(name.endswith("/probe_control.py") for name in control), control
    cpu = [r["image"]["cpu_s"] for r in found["rounds"]]
    invalidate = [r["image"]["invalidate_s"] for r in found["rounds"]]
    sys.stderr.write(
        f"  the runner's and the workers' imports: {statistics.median(cpu):.2f} s of CPU {cpu}; "
        f"the import caches' invalidation {statistics.median(invalidate) * 1000:.0f} ms "
        f"{invalidate} (spark-core's jar on the path)\n"
    )
