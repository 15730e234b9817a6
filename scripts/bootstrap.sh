#!/usr/bin/env bash
# Create (or refresh) the project virtualenv in .venv: Hutch with its dev, operator and spark
# extras (pyspark is large: about 850 MB installed), then hutch-localkube (the local Kubernetes,
# localkube/pyproject.toml), hutch-demo (the demo chain behind `make run`, demo/pyproject.toml)
# and hutch-testing (the test tooling, testing/pyproject.toml), all four editable.
# Idempotent: a stamp keyed by the four pyproject files' hash makes a second run instant.
# Used by `make run`, `make test` and CI.
#
# The third-party packages are installed once per key into a base venv kept with the other slow
# builds (HUTCH_CACHE, ~/.cache/hutch/venv/<key>: pip's unpacking and byte-compiling of 1.2 GB,
# about 80 s of CPU), and every clone's .venv is a small venv
# layered on it: a .pth file adds the base's site-packages as a site directory (its own .pth
# files included), the four editable installs are the clone's own, and .venv/bin holds the base's
# entry points pointed at .venv's interpreter. A fresh clone's bootstrap then takes seconds. The
# base is not written to after it is complete, so several clones can share it; the three most
# recently used are kept.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
VENV=.venv
STAMP="$VENV/.hutch-stamp"
BASE_LINK="$VENV/.hutch-base"
# What build_base does beyond installing the pyproject files' packages; a change to it changes
# the key, so no clone keeps a base built the old way.
BASE_RECIPE="2: no Spark worker zips"
want="$({ cat pyproject.toml localkube/pyproject.toml demo/pyproject.toml testing/pyproject.toml; echo "$BASE_RECIPE"; } | sha256sum | cut -c1-16)-$($PY -c 'import sys; print(sys.version_info[:2])' | tr -d ' ()')"
# The C extensions (broker/setup.py, spark/setup.py) are built in place by the editable install
# of the root project: a change to their sources or declarations re-runs that install alone.
NATIVE_STAMP="$VENV/.hutch-native-stamp"
native_want="$(cat setup.py broker/setup.py broker/hutch_broker/*/*.c spark/setup.py spark/hutch_spark/*.c | sha256sum | cut -c1-16)"
if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$want" ]] \
  && { [[ ! -f "$BASE_LINK" ]] || [[ -f "$(cat "$BASE_LINK")/complete" ]]; }; then
  if [[ "$(cat "$NATIVE_STAMP" 2>/dev/null)" != "$native_want" ]]; then
    echo "==> bootstrap: rebuilding the C extensions"
    PYTHON="$PY" bash scripts/install-build-deps.sh
    "$VENV/bin/pip" install --quiet --no-deps -e .
    echo "$native_want" > "$NATIVE_STAMP"
  fi
  exit 0
fi
PYTHON="$PY" bash scripts/install-build-deps.sh
CACHE="${HUTCH_CACHE:-$HOME/.cache/hutch}/venv"
BASE="$CACHE/$want"
pyver="$($PY -c 'import sys; print("python%d.%d" % sys.version_info[:2])')"

# The base: a venv with every third-party package Hutch's four distributions need and none of
# the four themselves. Built with the project installed (so pip resolves exactly what an install
# of the extras resolves), which is then uninstalled. It is built at its final path (pip's
# scripts and the compiled files name their absolute paths), under a lock, and marked complete
# last: a base without the mark is an interrupted build and is built again.
build_base() {
  echo "==> bootstrap: installing the third-party packages into $BASE (once per pyproject change)"
  rm -rf "$BASE"
  "$PY" -m venv "$BASE"
  "$BASE/bin/pip" install --quiet --upgrade pip
  "$BASE/bin/pip" install --quiet -e '.[dev,operator,spark]'
  "$BASE/bin/pip" uninstall --quiet --yes hutch
  # No pyspark.zip or py4j zip in the venv's pyspark, as in the hutch-spark image
  # (spark/jobs/Dockerfile says why): Spark's Python processes then import the installed pyspark,
  # so local Spark tests and bench/stream_bench.py start them as the image does.
  rm -f "$("$BASE/bin/python" -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))')"/python/lib/{pyspark.zip,py4j-*-src.zip}
  touch "$BASE/complete"
}

mkdir -p "$CACHE"
exec 9> "$CACHE/.lock"
flock 9  # one bootstrap at a time builds or removes a base
[[ -f "$BASE/complete" ]] || build_base
touch "$BASE/complete"  # most recently used
# Keep the three most recently used bases.
for old in $(ls -1t "$CACHE"/*/complete 2>/dev/null | tail -n +4); do
  echo "==> bootstrap: removing an older base venv, $(dirname "$old")"
  rm -rf "$(dirname "$old")"
done
flock -u 9

echo "==> bootstrap: creating $VENV on the base venv $BASE"
rm -rf "$VENV"
"$PY" -m venv --without-pip "$VENV"
site="$VENV/lib/$pyver/site-packages"
# `import` lines of a .pth file run at start-up; addsitedir also reads the base's own .pth files.
echo "import site; site.addsitedir('$BASE/lib/$pyver/site-packages')" > "$site/_hutch_base.pth"
echo "$BASE" > "$BASE_LINK"
# The base's entry points, for .venv's interpreter: Python scripts (pytest, mypy, pip, ...) are
# copied with their interpreter line pointed at .venv; anything else (ruff, kubectl, Spark's
# shell scripts, which find Spark through their real path) is a symbolic link into the base.
for f in "$BASE/bin/"*; do
  name="$(basename "$f")"
  [[ -e "$VENV/bin/$name" || "$name" == activate* || "$name" == Activate.ps1 || -d "$f" ]] && continue
  if head -n 1 "$f" | grep -qx "#!$BASE/bin/python[0-9.]*"; then
    sed "1s|.*|#!$PWD/$VENV/bin/python|" "$f" > "$VENV/bin/$name"
    chmod +x "$VENV/bin/$name"
  else
    ln -s "$f" "$VENV/bin/$name"
  fi
done
# The four editable installs, the clone's own (their dependencies are in the base). The local
# Kubernetes, the demo chain, then the test tooling: distributions of their own, so they stay out
# of the wheel and images.
"$VENV/bin/pip" install --quiet --no-deps -e . -e localkube -e demo -e testing
echo "$want" > "$STAMP"
echo "$native_want" > "$NATIVE_STAMP"
echo "==> bootstrap: done ($("$VENV/bin/python" --version))"
