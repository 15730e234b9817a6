#!/usr/bin/env bash
# The node level's Go builds (localkube/gobuild/build-binaries.sh, then build-spark-operator.sh,
# in the order the tests need them), run in the background while scripts/test.sh runs the fast
# and the broker levels, and waited for before broker/serial.
#
# Why: cold (an empty HUTCH_CACHE) the builds take about 17 minutes of both cores, and only the
# node level needs their binaries; warm they are a cache check of a second. Run one after the
# other, they came before any test.
# Why nice 19: the broker level runs on two workers and then its timing-sensitive modules, and
# its tests must keep the CPU they are written for; at nice 19 the compilers take what the tests
# leave idle, and the serial pass starts only once the build is over, with nothing beside it.
# Why a session of its own (setsid): the build is one process group, so stopping it stops go and
# its compilers too (kill -- -PGID), and Ctrl-C in the terminal reaches the test run, whose EXIT
# trap stops the build; no build process outlives the run.
#
# scripts/test.sh sources this file: bg_build_start, bg_build_wait and bg_build_stop (in its
# EXIT trap); the last two append the build's lines to its TIMES. Run as a script, it is the build itself: bash
# scripts/background-build.sh DIR. The build's files in DIR ($HUTCH_BACKGROUND_BUILD, which
# hutch_testing.backgroundbuild reads: the chart tests of the broker level wait there for helm):
#   build.log       both scripts' output, each line prefixed with the seconds since the start
#   pid             the build's process group
#   <step>.rc       a step's exit code once it ended (k8s-bins, spark-operator)
#   rc              "<exit code> <seconds>" once the whole build ended
# DIR is a new directory under test-artifacts/ (BG_BUILD_ROOT), removed after a successful wait.
# HUTCH_BUILD_PROGRESS_EVERY (seconds, 30) spaces the wait's progress lines.

# bg_build_stamp START: stdin to stdout, each line prefixed with the seconds since START.
bg_build_stamp() {
    local start=$1 line now
    while IFS= read -r line || [[ -n $line ]]; do
        printf -v now '%(%s)T' -1
        printf '%d %s\n' $((now - start)) "$line"
    done
}

# bg_build_step DIR NAME COMMAND...: runs one step and records its exit code in DIR/NAME.rc.
bg_build_step() {
    local dir=$1 name=$2 rc=0
    shift 2
    echo "background-build: step $name: start"
    "$@" || rc=$?
    echo "background-build: step $name: exit $rc"
    echo "$rc" >"$dir/$name.rc.tmp" && mv "$dir/$name.rc.tmp" "$dir/$name.rc"
    return "$rc"
}

# bg_build_run DIR: the build itself; its exit code is the first failing step's.
bg_build_run() {
    local dir=$1 start end status
    echo "$$" >"$dir/pid.tmp" && mv "$dir/pid.tmp" "$dir/pid"   # a session leader: pid = pgid
    printf -v start '%(%s)T' -1
    {
        bg_build_step "$dir" k8s-bins bash localkube/gobuild/build-binaries.sh &&
            bg_build_step "$dir" spark-operator bash localkube/gobuild/build-spark-operator.sh
    } </dev/null 2>&1 | bg_build_stamp "$start" >"$dir/build.log"
    status=${PIPESTATUS[0]}
    printf -v end '%(%s)T' -1
    echo "$status $((end - start))" >"$dir/rc.tmp" && mv "$dir/rc.tmp" "$dir/rc"
    return "$status"
}

# bg_build_alive: the build's process group still has a member that is not a zombie (an
# orphan's zombie waits for PID 1 to reap it, and kill -0 counts it).
bg_build_alive() {
    local stat fields
    for stat in /proc/[0-9]*/stat; do
        read -r fields 2>/dev/null <"$stat" || continue     # it may have ended meanwhile
        read -r -a fields <<<"${fields##*) }"    # state ppid pgrp ... (after the command name)
        if [[ ${fields[0]} != Z && ${fields[2]} == "$BG_BUILD_PGID" ]]; then
            return 0
        fi
    done
    return 1
}

# bg_build_start: starts the build at nice 19 in a session of its own; exports
# HUTCH_BACKGROUND_BUILD for the tests.
bg_build_start() {
    local root=${BG_BUILD_ROOT:-$PWD/test-artifacts}   # where its directory goes
    mkdir -p "$root"
    BG_BUILD_DIR=$(mktemp -d "$root/background-build-XXXXXX")
    export HUTCH_BACKGROUND_BUILD=$BG_BUILD_DIR
    BG_BUILD_STARTED=$SECONDS
    setsid nice -n 19 bash scripts/background-build.sh "$BG_BUILD_DIR" \
        </dev/null >"$BG_BUILD_DIR/runner.out" 2>&1 &
    local tries=0
    until [[ -f $BG_BUILD_DIR/pid ]]; do     # written by the build's first command
        if ((++tries > 300)); then
            echo "==> the background build did not start; $BG_BUILD_DIR/runner.out:" >&2
            cat "$BG_BUILD_DIR/runner.out" >&2
            exit 1
        fi
        sleep 0.1
    done
    BG_BUILD_PGID=$(<"$BG_BUILD_DIR/pid")
    echo "==> building the node level's binaries in the background (nice 19, process group" \
        "$BG_BUILD_PGID): $BG_BUILD_DIR/build.log"
}

# bg_build_progress: one line on what the build is doing, from its log.
bg_build_progress() {
    "${PY:-.venv/bin/python}" -m hutch_testing.backgroundbuild progress \
        "$BG_BUILD_DIR/build.log" $((SECONDS - BG_BUILD_STARTED)) 2>/dev/null ||
        tail -n 1 "$BG_BUILD_DIR/build.log"
}

# bg_build_ended: the build's "<exit code> <seconds>" once it ended (status 1 while it runs).
bg_build_ended() {
    local running=0
    bg_build_alive && running=1     # first: a build that ends meanwhile has written its rc
    if [[ -f $BG_BUILD_DIR/rc ]]; then
        cat "$BG_BUILD_DIR/rc"
    elif ((running)); then
        return 1
    else
        echo "==> the background build ended without a status (killed?)" >&2
        echo "1 $((SECONDS - BG_BUILD_STARTED))"
    fi
}

# bg_build_report STATUS SECONDS: the build's line in TIMES; a failure loudly, with the log's
# tail (returns the build's exit code).
bg_build_report() {
    local status=$1 seconds=$2
    BG_BUILD_DONE=1
    TIMES+=("$(printf '%-13s %5d s  (exit %d, in the background)' build "$seconds" "$status")")
    if ((status != 0)); then
        echo "==> the background build FAILED (exit $status) after $seconds s;" \
            "the last 40 lines of $BG_BUILD_DIR/build.log:" >&2
        tail -n 40 "$BG_BUILD_DIR/build.log" | sed 's/^/    /' >&2
        echo "==> the background build FAILED (exit $status): the node level cannot run" >&2
        return "$status"
    fi
}

# bg_build_wait: waits for the build, a progress line every ~30 s; on a failure prints the log's
# tail and exits with the build's exit code. The build's time and the wait go into TIMES.
bg_build_wait() {
    local began=$SECONDS every=${HUTCH_BUILD_PROGRESS_EVERY:-30} next ended status=0
    next=$((SECONDS + every))
    if ! bg_build_ended >/dev/null 2>&1; then
        echo "==> waiting for the background build: $(bg_build_progress)"
    fi
    until ended=$(bg_build_ended); do
        if ((SECONDS >= next)); then
            echo "    waited $((SECONDS - began)) s: $(bg_build_progress)"
            next=$((SECONDS + every))
        fi
        sleep 1
    done
    bg_build_report $ended || status=$?
    TIMES+=("$(printf '%-13s %5d s' 'build wait' $((SECONDS - began)))")
    if ((status != 0)); then
        exit "$status"
    fi
    echo "==> background build done in ${ended#* } s (waited $((SECONDS - began)) s)"
    unset HUTCH_BACKGROUND_BUILD    # the binaries are there: later levels find them at once
    rm -rf "$BG_BUILD_DIR"
}

# bg_build_stop: for the EXIT trap, so that a failed level or Ctrl-C leaves no build process
# behind: stops a build still running (TERM to its process group, KILL after 5 s). A build that
# ended without being waited for is reported; if it failed (which may be why a level failed:
# the chart tests wait for its helm), loudly, and it returns the build's exit code.
bg_build_stop() {
    [[ -n ${BG_BUILD_PGID:-} && -z ${BG_BUILD_DONE:-} ]] || return 0
    local ended
    if ended=$(bg_build_ended); then
        bg_build_report $ended || return $?    # (a bare return, in a trap, returns the trap's $?)
        rm -rf "$BG_BUILD_DIR"
        return 0
    fi
    BG_BUILD_DONE=1
    echo "==> stopping the background build (process group $BG_BUILD_PGID)" >&2
    kill -TERM -- "-$BG_BUILD_PGID" 2>/dev/null || true
    local tries=0
    while bg_build_alive && ((++tries <= 50)); do sleep 0.1; done
    if bg_build_alive; then
        kill -KILL -- "-$BG_BUILD_PGID" 2>/dev/null || true
    fi
    TIMES+=("$(printf '%-13s %5d s  (stopped)' build $((SECONDS - BG_BUILD_STARTED)))")
}

if [[ ${BASH_SOURCE[0]} == "$0" ]]; then
    set -uo pipefail
    cd "$(dirname "$0")/.."
    bg_build_run "$1"
fi
