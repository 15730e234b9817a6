#!/usr/bin/env bash
# Create (or refresh) the project virtualenv in .venv and install Hutch with its dev, operator
# and spark extras (pyspark is large: about 850 MB installed), then hutch-localkube (the local
# Kubernetes, localkube/pyproject.toml), hutch-demo (the demo chain behind `make run`,
# demo/pyproject.toml) and hutch-testing (the test tooling, testing/pyproject.toml).
# Idempotent: a stamp keyed by the four pyproject files' hash makes a
# second run instant.  Used by `make run`, `make test` and CI.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
VENV=.venv
STAMP="$VENV/.hutch-stamp"
want="$(cat pyproject.toml localkube/pyproject.toml demo/pyproject.toml testing/pyproject.toml | sha256sum | cut -c1-16)-$($PY -c 'import sys; print(sys.version_info[:2])' | tr -d ' ()')"
if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$want" ]]; then
  exit 0
fi
echo "==> bootstrap: creating $VENV and installing Hutch (dev, operator, spark extras)"
"$PY" -m venv "$VENV"
"$VENV/bin/pip" install --quiet --upgrade pip
"$VENV/bin/pip" install --quiet -e '.[dev,operator,spark]'
# The local Kubernetes, the demo chain, then the test tooling: distributions of their own, so they
# stay out of the wheel and images.
"$VENV/bin/pip" install --quiet --no-deps -e localkube
"$VENV/bin/pip" install --quiet --no-deps -e demo
"$VENV/bin/pip" install --quiet --no-deps -e testing
# Bytecode inside the venv's pyspark.zip and py4j zip, as the hutch-spark image has it
# (hutch_spark.zipbytecode): Spark puts those zips first on the PYTHONPATH of every Python
# process it starts (each query's streaming runner, each worker daemon), and zipimport compiles
# every module it imports from a zip of sources: about 0.6 s of CPU a process. Local Spark
# tests and bench/stream_bench.py then start as the image does. pyspark's own test files
# raise syntax warnings when compiled: not ours, so not shown.
"$VENV/bin/python" -W ignore::SyntaxWarning -W ignore::DeprecationWarning -m hutch_spark.zipbytecode \
  "$(cd "$("$VENV/bin/python" -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))')" \
  && pwd)"/python/lib/*.zip
echo "$want" > "$STAMP"
echo "==> bootstrap: done ($("$VENV/bin/python" --version))"
