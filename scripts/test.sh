#!/usr/bin/env bash
# The test suite, level by level, cheapest first, stopping at the first level that fails:
# fast (pure, in memory: a failure shows in seconds), broker (processes and sockets on loopback,
# side by side with RabbitMQ 3.10.8), node (the Kubernetes planes and the real node), then e2e.
# The node level runs as two pytest processes at once (docs/testing.md#how-the-node-level-runs):
# in the background, the tests that need a control plane and never the real node (the apiserver
# and workloads tiers, marker control_plane_only), printed as node/control; in the foreground,
# the rest of the level and e2e in one session, printed as node+e2e, so e2e runs on the node
# plane the node-tier tests started (no second plane start, no second collection); e2e runs last
# in it and not at all once a test of that session failed (e2e/conftest.py), and its own time is
# printed (E2E: ...). The background one's output is printed as one block when the foreground
# one has ended, passed or failed; should the background one fail first, one line says so at
# once; the run fails if either failed (scripts/test-levels.sh runs the levels and the summary).
# Each test's level is derived by hutch_testing.levels (docs/testing.md#test-levels); together the
# levels are every test of tests/ and e2e/. Dependencies that cannot start fail the run loudly
# under CI (HUTCH_*_REQUIRED); nothing skips silently. Each level's time is printed at the end.
# The node level's Go builds (the Kubernetes binaries, helm, the Spark Operator) run in the
# background at nice 19 from the start, while the fast and the broker parallel levels run
# (scripts/background-build.sh); the run waits for them before broker/serial and stops, with the
# build's log tail and exit code, if they failed. Their time and the wait are in the summary.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
source scripts/background-build.sh
bash scripts/install-ui-deps.sh  # Chromium and its driver for the Web UI's tests (tests/ui)
bash scripts/install-node-deps.sh  # the node tier's Debian packages: quick once installed
source scripts/test-levels.sh  # level, level_beside, summary, interrupted

# At the end, however it ends: no build process is left behind (a failed level, Ctrl-C), and a
# build that failed before the wait (the broker level's chart tests wait for its helm) is
# reported with its log's tail, its exit code the run's.
finish() {
  local status=$?
  bg_build_stop || status=$?
  summary
  exit "$status"
}
trap finish EXIT
trap interrupted INT TERM
bg_build_start

# The fast level writes the bytecode of what it imports (__pycache__, git-ignored; image builds
# skip it), even where the environment sets PYTHONDONTWRITEBYTECODE: without it every pytest
# session compiles and assertion-rewrites all of tests/ again at collection (17 s of CPU for the
# fast level's collection, 8 s with the files), and so does each xdist worker; later sessions
# and the hutch-broker processes the tests start read the files it wrote.
# On two xdist workers: each collects everything, but the second core is otherwise idle here
# (docs/testing.md#test-levels: 42 s against 60 s of wall in a fresh clone).
PYTHONDONTWRITEBYTECODE= level fast tests -m fast -q -n 2 --durations=5 "$@"
# The broker level in two passes (docs/testing.md#how-the-broker-level-runs): most of it on two
# pytest-xdist workers, a module per worker at a time (--dist loadfile: a module's shared brokers
# stay its own), since most of its time is waiting on sockets and processes; the long modules
# (Spark, slow) are handed out first (hutch_testing.modorder; --no-loadscope-reorder keeps that
# order), so neither worker runs one alone at the end. Then, alone, the timing-sensitive modules
# hutch_testing.serial lists (marker serial), which would measure the other worker as well.
# Together the two passes select exactly what -m broker selects.
level broker tests -m "broker and not serial" -n 2 --dist loadfile --no-loadscope-reorder \
  --durations=30 "$@"
bg_build_wait  # the node level needs the binaries
if compgen -G "e2e/test_*.py" > /dev/null; then
  # The node level as two pytest processes at once, each with its own planes (run dirs, ports):
  # in the background the apiserver and workloads tiers (marker control_plane_only: no real
  # node), in the foreground the rest and e2e, on the node plane (the node's lock is this one's
  # alone). Together the two select exactly what -m "node or e2e" selects.
  # The background one starts before the serial pass, at a CPU weight of 128 against each
  # serial process's 1024 (beside_weight: a cgroup of its own): the serial pass times canaries
  # and uses about one core of two, so the background level takes the other one without
  # competing with it (docs/testing.md#how-the-node-level-runs); then even, beside node+e2e.
  level_beside node/control tests e2e -m "node and control_plane_only and not e2e" \
    --durations=30 "$@"
  beside_until node+e2e
  beside_weight 128
  level broker/serial tests -m "broker and serial" --durations=30 "$@"
  beside_weight 1024
  level node+e2e tests e2e -m "(node and not control_plane_only) or e2e" --durations=40 "$@"
else
  level broker/serial tests -m "broker and serial" --durations=30 "$@"
  level node tests -m node --durations=30 "$@"
fi
