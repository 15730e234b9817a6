#!/usr/bin/env bash
# Build the Kubeflow Spark Operator's controller (`spark-operator`) from the Go module proxy.
#
# Why: charts/hutch-spark renders a SparkApplication, and only a real Spark Operator can say
# whether it runs. There is no registry to pull its image from, so, like the Kubernetes binaries
# (build-binaries.sh), the controller is built from its released module and cached per version
# under ~/.cache/hutch/spark-operator/<version>_<go>_<platform>/. The module's go.mod has
# `replace` lines, so `go install pkg@version` refuses it: the module is copied out of the module
# cache and built as the main module, its own go.sum checking every dependency. Only
# cmd/operator is built (the one binary the upstream image ships), stripped and -trimpath.
# The module's Helm chart is copied beside the binary: the tests install it from there.
#
# Usage: bash localkube/gobuild/build-spark-operator.sh -> prints the cache dir (stdout's last
# line), which holds bin/spark-operator, chart/ (charts/spark-operator-chart), timings.txt.
# A second run finds `.complete` and returns at once. The Spark node tests call it lazily;
# `make k8s-bins` calls it too, and scripts/test.sh in the background, so CI pays once.
set -euo pipefail

SPARK_OPERATOR_VERSION=v2.3.0
MODULE=github.com/kubeflow/spark-operator/v2

HUTCH_CACHE="${HUTCH_CACHE:-$HOME/.cache/hutch}"
GO="${GO:-$(command -v go || echo /usr/local/go/bin/go)}"
export GOTOOLCHAIN=local
export GOMODCACHE="${HUTCH_GOMODCACHE:-$HUTCH_CACHE/go/mod}"
export GOCACHE="${HUTCH_GOCACHE:-$HUTCH_CACHE/go/build}"
export GOFLAGS="-buildvcs=false -mod=mod -p=2"
export CGO_ENABLED=0
export GOPROXY="${GOPROXY:-https://proxy.golang.org,direct}"

log() { echo "build-spark-operator: $*" >&2; }

if ! [ -x "$GO" ]; then
    log "no Go toolchain found (set GO=/path/to/go)"
    exit 2
fi
GO_VERSION="$("$GO" env GOVERSION)"
PLATFORM="$("$GO" env GOOS)-$("$GO" env GOARCH)"
ROOT="$HUTCH_CACHE/spark-operator"
FINAL="$ROOT/${SPARK_OPERATOR_VERSION}_${GO_VERSION}_${PLATFORM}"

if [ -f "$FINAL/.complete" ]; then
    echo "$FINAL"
    exit 0
fi
mkdir -p "$ROOT" "$GOMODCACHE" "$GOCACHE"
exec 9>"$ROOT/.lock"
if ! flock -n 9; then
    log "another build holds $ROOT/.lock; waiting"
    flock 9
fi
if [ -f "$FINAL/.complete" ]; then
    echo "$FINAL"
    exit 0
fi

STAGE="$(mktemp -d "$ROOT/.stage-XXXXXX")"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/hutch-sparkop-XXXXXX")"
trap 'chmod -R u+w "$WORK" 2>/dev/null; rm -rf "$STAGE" "$WORK"' EXIT
chmod 755 "$STAGE"
mkdir -p "$STAGE/bin"
START=$SECONDS

info="$("$GO" mod download -json "$MODULE@$SPARK_OPERATOR_VERSION")"
src="$(jq -r .Dir <<<"$info")"
commit="$(jq -r '.Origin.Hash // "unknown"' <<<"$info")"
log "$MODULE@$SPARK_OPERATOR_VERSION commit=$commit (download $((SECONDS - START)) s)"

# The module cache is read-only; the build needs a writable main module (go.sum may gain lines
# under -mod=mod; nothing else changes).
cp -r "$src" "$WORK/src"
chmod -R u+w "$WORK/src"
cd "$WORK/src"
began=$SECONDS
ldf="-s -w"
ldf+=" -X $MODULE.version=${SPARK_OPERATOR_VERSION#v}"  # it appends the commit itself
ldf+=" -X $MODULE.gitCommit=$commit -X $MODULE.gitTreeState=clean"
ldf+=" -X $MODULE.buildDate=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
"$GO" build -trimpath -ldflags "$ldf" -o "$STAGE/bin/spark-operator" ./cmd/operator
echo "phase=build seconds=$((SECONDS - began))" >>"$STAGE/timings.txt"

cp -r "$src/charts/spark-operator-chart" "$STAGE/chart"
chmod -R u+w,a+rX "$STAGE/chart"

out="$("$STAGE/bin/spark-operator" version 2>&1 || true)"
log "spark-operator version: ${out//$'\n'/ }"
if [[ "$out" != *"${SPARK_OPERATOR_VERSION#v}"* ]]; then
    log "expected ${SPARK_OPERATOR_VERSION#v} in: $out"
    exit 1
fi
{
    echo "phase=total seconds=$((SECONDS - START))"
    echo "version=$SPARK_OPERATOR_VERSION commit=$commit go=$GO_VERSION cores=$(nproc)"
    echo "binary=$(du -h "$STAGE/bin/spark-operator" | cut -f1) built=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
} | tee -a "$STAGE/timings.txt" >&2

rm -rf "$FINAL"
mv "$STAGE" "$FINAL"
touch "$FINAL/.complete"
echo "$FINAL"
