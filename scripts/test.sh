#!/usr/bin/env bash
# The test suite: unit, broker (real sockets, pika/aio-pika), side by side with
# RabbitMQ 3.10.8, and the Kubernetes control-plane tests.  Dependencies that
# cannot start fail the run loudly under CI (HUTCH_*_REQUIRED); nothing skips silently.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
bash scripts/install-ui-deps.sh  # Chromium and its driver for the Web UI's tests (tests/ui)
echo "==> pytest tests/"
"$PY" -m pytest tests --durations=30 "$@"
if compgen -G "e2e/test_*.py" > /dev/null; then
  echo "==> pytest e2e/"
  "$PY" -m pytest e2e -m e2e --durations=10
fi
