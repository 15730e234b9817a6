#!/usr/bin/env bash
# The main job in one command: the whole Hutch chain in real containers on a local node.
#
# Installs what it needs (the venv via bootstrap.sh, the spark extra, Java 17 and the node's
# Debian packages through apt when run as root), then runs `python -m hutch_demo.quickstart`:
# the Kubernetes binaries and the images (built once, cached), the local plane with a real node
# (kubelet, containerd, kube-proxy), the CRDs, `helm install` of the operator, a Broker from
# examples/ as a StatefulSet Pod, the examples' topology, JSON events published through a
# port-forward, the Spark job as a driver Pod and two executor Pods (spark-submit), and a
# summary. It stops everything it started at the end (also on Ctrl-C). Arguments pass through:
#   --keep          keep it all running and print how to connect (Ctrl-C stops it)
#   --events N      how many JSON events to publish (default 3000)
#   --spark-local   run the Spark job in local mode on this host (minutes faster on 2 cores)
#   --kubeconfig F  use this cluster (kind, images loaded with `kind load`) instead
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

# The node tier's Debian packages (containerd, runc, CNI plugins, debootstrap, iptables, nft);
# a no-op when installed. Without --kubeconfig the quickstart needs them and root.
if [[ " $* " != *" --kubeconfig"* ]]; then
  bash scripts/install-node-deps.sh
fi

exec "$PY" -m hutch_demo.quickstart "$@"
