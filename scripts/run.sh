#!/usr/bin/env bash
# A lone hutch-broker on localhost (`make broker`), with durable state under
# .hutch-dev/broker.  Ctrl-C (SIGINT) or SIGTERM stops it cleanly.
set -euo pipefail
cd "$(dirname "$0")/.."
AMQP_PORT=${HUTCH_AMQP_PORT:-5672}
HTTP_PORT=${HUTCH_HTTP_PORT:-15672}
DATA=${HUTCH_DATA_DIR:-.hutch-dev/broker}
mkdir -p "$DATA"
cat <<INFO
==> hutch-broker starting
    AMQP URI:        amqp://guest:guest@127.0.0.1:${AMQP_PORT}/%2F
    Management API:  http://guest:guest@127.0.0.1:${HTTP_PORT}/api/overview
    Metrics:         http://127.0.0.1:${HTTP_PORT}/metrics
    Data directory:  ${DATA}
INFO
exec .venv/bin/hutch-broker --amqp-port "$AMQP_PORT" --http-port "$HTTP_PORT" --data-dir "$DATA"
