#!/usr/bin/env bash
# The main job in one command: the whole Hutch chain on a local Kubernetes control plane.
#
# Installs what it needs (the venv via bootstrap.sh, the spark extra, Java 17 through apt when
# run as root), then runs `python -m hutch_testing.quickstart`: CRDs, the operator, a Broker
# from examples/, the broker process with the config the operator rendered, the examples'
# topology, JSON events, the Spark job, and a summary. It stops everything it started at the
# end (also on Ctrl-C). Arguments pass through:
#   --keep          keep it all running and print how to connect (Ctrl-C stops it)
#   --events N      how many JSON events to publish (default 3000)
#   --kubeconfig F  use this cluster (kind) instead of the local control plane
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python

bash scripts/bootstrap.sh

if ! "$PY" -c 'import pyspark, pyarrow' 2>/dev/null; then
  echo "==> quickstart: installing the spark extra (pyspark is ~850 MB; once)"
  .venv/bin/pip install --quiet -e '.[spark]'
  "$PY" -c 'import pyarrow' 2>/dev/null || .venv/bin/pip install --quiet 'pyarrow>=18'
fi

if ! command -v java >/dev/null 2>&1; then
  if [[ "$(id -u)" == 0 ]] && command -v apt-get >/dev/null 2>&1; then
    echo "==> quickstart: installing Java 17 for Spark (apt-get)"
    apt-get update -qq && apt-get install -y -qq openjdk-17-jre-headless >/dev/null
  else
    echo "quickstart: Spark needs Java 17 or 21: sudo apt-get install -y openjdk-17-jre-headless" >&2
    exit 2
  fi
fi

exec "$PY" -m hutch_testing.quickstart "$@"
