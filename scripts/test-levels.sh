#!/usr/bin/env bash
# How scripts/test.sh runs a level and reports it: `level NAME ARGS...` runs pytest ARGS in the
# foreground, `level_beside NAME ARGS...` beside the next one, in the background
# (docs/testing.md#how-the-node-level-runs); `summary` prints each level's time and exit code and
# names the levels that failed; `interrupted` is the run's trap for Ctrl-C and SIGTERM.
#
# Why a file of its own: scripts/test.sh starts its levels as soon as it runs, so functions
# defined in it cannot be tried alone; from here tests/scripts/test_test_levels.py sources them
# and drives them with a stand-in pytest (PY): a level beside another failing, Ctrl-C.
#
# The caller sets PY (the Python that runs pytest) and its traps: EXIT prints `summary`, INT and
# TERM call `interrupted`. TIMES holds the summary's lines (scripts/background-build.sh adds its
# own), FAILED the levels that failed.

TIMES=() FAILED=()
summary() {
  echo "==> level times"
  for line in "${TIMES[@]}"; do echo "    $line"; done
  if ((${#FAILED[@]})); then
    local joined
    printf -v joined '%s, ' "${FAILED[@]}"
    echo "==> failed: ${joined%, }"
  fi
}
# failed_if STATUS TEXT: TEXT among the summary's failed levels, unless STATUS is 0 or 5.
failed_if() {
  if [[ $1 -ne 0 && $1 -ne 5 ]]; then FAILED+=("$2"); fi
}

# Ctrl-C or SIGTERM: the level that was running gets its line in the summary, as at a normal end
# (its pytest has ended by then: the shell runs the trap once it has), the one beside it (if
# any) is waited for and printed with its lines, and the run exits 130.
INTERRUPTED=0
interrupted() {
  local status=$?
  INTERRUPTED=1
  if ((LEVEL_RUNNING)); then
    level_ended "$status" ", interrupted"
  fi
  beside_join "$LEVEL_NAME"
  exit 130
}

# One level: pytest's exit code 5 (no test selected, e.g. a -k that only matches other levels)
# is not a failure. A level started beside it (level_beside) ends with it: it is waited for once
# this one's pytest has ended, passed or failed, and the run stops if either failed.
LEVEL_NAME="" LEVEL_STARTED=0 LEVEL_RUNNING=0  # the foreground level, for `interrupted`
level() {
  local status=0
  LEVEL_NAME=$1 LEVEL_STARTED=$SECONDS LEVEL_RUNNING=1
  shift
  echo "==> level $LEVEL_NAME: pytest $*"
  "$PY" -m pytest "$@" || status=$?
  level_ended "$status"
  if [[ -z $BESIDE_UNTIL || $BESIDE_UNTIL == "$LEVEL_NAME" || ($status -ne 0 && $status -ne 5) ]]
  then
    beside_join "$LEVEL_NAME"
  fi
  for code in "$status" "$BESIDE_STATUS"; do
    if [[ $code -ne 0 && $code -ne 5 ]]; then
      exit "$code"
    fi
  done
}

# level_ended STATUS [HOW]: the foreground level's line in the summary (HOW: ", interrupted", and
# then it is not counted as failed: it was stopped).
level_ended() {
  LEVEL_RUNNING=0
  TIMES+=("$(printf '%-13s %5d s  (exit %d%s)' "$LEVEL_NAME" $((SECONDS - LEVEL_STARTED)) "$1" \
    "${2:-}")")
  [[ -n ${2:-} ]] || failed_if "$1" "$LEVEL_NAME (exit $1)"
}

# level_beside NAME ARGS...: a level in the background, beside the next `level`: pytest ARGS with
# its output in a file of its own temp dir, printed as one block by beside_join. The two pytests
# keep to halves of the ports they pick for brokers (HUTCH_PORT_SHARD 1/2 and 0/2, as the broker
# level's two workers do). Ctrl-C reaches both: a shell without job control starts `&` jobs with
# SIGINT ignored, so env --default-signal gives the background pytest its KeyboardInterrupt
# back (unless this run itself was started with SIGINT ignored: then neither pytest takes it),
# and each stops its own planes (the terminal signals the whole process group, so nothing
# sends a second SIGINT, which would break into that teardown); the trap waits for the
# background one, prints it, then exits. Should it fail while the foreground one still runs, one
# line says so at once (beside_run); the foreground one goes on, and the run fails at its end.
BESIDE_NAME="" BESIDE_PID="" BESIDE_LOG="" BESIDE_STARTED=0 BESIDE_EPOCH=0 BESIDE_STATUS=0
BESIDE_UNTIL="" BESIDE_CGROUP=""
level_beside() {
  BESIDE_NAME=$1 BESIDE_STATUS=0 BESIDE_UNTIL=""
  shift
  local sigint=(env --default-signal=INT)
  if [[ $(trap -p INT) == "trap -- '' SIGINT" ]]; then
    sigint=()  # ignored since this run started: the foreground pytest ignores it too
  fi
  BESIDE_LOG="$(mktemp -d "${TMPDIR:-/tmp}/hutch-level-XXXXXX")/${BESIDE_NAME//\//-}.log"
  echo "==> level $BESIDE_NAME, in the background (output in $BESIDE_LOG, printed when the" \
    "level it runs beside ends): pytest $*"
  BESIDE_STARTED=$SECONDS
  printf -v BESIDE_EPOCH '%(%s)T' -1
  BESIDE_CGROUP=$(beside_cgroup)
  beside_run "${sigint[@]}" "$PY" -m pytest "$@" &
  BESIDE_PID=$!
  export HUTCH_PORT_SHARD=0/2
}

# beside_run COMMAND...: level_beside's pytest, in the subshell `&` makes, with its output in
# BESIDE_LOG and pytest's exit code. A failure prints one line at once, whatever the foreground
# does meanwhile. On Ctrl-C or SIGTERM it prints nothing (the run is ending) and keeps waiting
# for pytest's teardown, so the trap's beside_join still waits for that, as before. It traps
# SIGINT only when the run takes it (COMMAND starts with env --default-signal): a trap gives the
# children a default SIGINT, which a run started with SIGINT ignored must not.
beside_run() {
  local status=0 stopped=0
  trap 'stopped=1' TERM
  if [[ $1 == env ]]; then trap 'stopped=1' INT; fi
  if [[ -n $BESIDE_CGROUP ]]; then echo "$BASHPID" >"$BESIDE_CGROUP/cgroup.procs"; fi
  HUTCH_PORT_SHARD=1/2 "$@" </dev/null >"$BESIDE_LOG" 2>&1 || status=$?
  if ((!stopped)) && [[ $status -ne 0 && $status -ne 5 ]]; then
    printf '\n==> level %s FAILED in the background: exit %d after %d s; %s\n' "$BESIDE_NAME" \
      "$status" $((SECONDS - BESIDE_STARTED)) \
      "the level beside it goes on; this one's output comes when it ends; the run will fail"
  fi
  return "$status"
}

# beside_join [NAME]: waits for the level_beside one (if any), prints its output as one block,
# records its time (to its output's last write: pytest's summary line) and that of both at once
# (NAME: the level it ran beside); its exit code in BESIDE_STATUS.
beside_join() {
  [[ -n $BESIDE_PID ]] || return 0
  local status=0 seconds how=""
  wait "$BESIDE_PID" || status=$?
  BESIDE_PID="" BESIDE_STATUS=$status
  unset HUTCH_PORT_SHARD
  seconds=$(($(stat -c %Y "$BESIDE_LOG") - BESIDE_EPOCH))
  echo "==> level $BESIDE_NAME, which ran in the background: exit $status after $seconds s;" \
    "its output:"
  cat "$BESIDE_LOG"
  echo "==> end of level $BESIDE_NAME's output"
  if ((INTERRUPTED)) && [[ $status -eq 2 || $status -gt 128 ]]; then
    how=", interrupted"  # pytest's exit code for KeyboardInterrupt, or killed by the signal
  else
    failed_if "$status" "$BESIDE_NAME (exit $status, in the background)"
  fi
  TIMES+=("$(printf '%-13s %5d s  (exit %d, in the background%s)' "$BESIDE_NAME" "$seconds" \
    "$status" "$how")")
  TIMES+=("$(printf '%-13s %5d s  (%s and %s at once)' "both" $((SECONDS - BESIDE_STARTED)) \
    "${1:-the level above}" "$BESIDE_NAME")")
  rm -rf "$(dirname "$BESIDE_LOG")"
  if [[ -n $BESIDE_CGROUP ]]; then rmdir "$BESIDE_CGROUP" 2>/dev/null || true; fi
  BESIDE_CGROUP="" BESIDE_UNTIL=""
}

# beside_until NAME: the level_beside one runs on past the next level, beside every level up to
# the end of level NAME, and is joined there (or at the first of them that fails: the run stops).
beside_until() {
  BESIDE_UNTIL=$1
}

# beside_weight SHARES: the CPU weight of the level_beside one's processes, all of them and all
# they start, as one cgroup v1 "cpu" group under this run's own (1024 is the weight of each
# process of the foreground level). A light weight lets the background level take what a level
# that times things leaves of the two cores, which then keeps its lead whenever it is busy.
# Without a cgroup it can write (not root, cgroup v2), it says so once a run (scripts/test.sh
# calls it twice) and the weight stays even.
BESIDE_NO_CGROUP_SAID=0
beside_weight() {
  if [[ -n $BESIDE_CGROUP ]]; then
    echo "$1" >"$BESIDE_CGROUP/cpu.shares"
  elif ((!BESIDE_NO_CGROUP_SAID)); then
    BESIDE_NO_CGROUP_SAID=1
    echo "==> no cgroup v1 cpu group for level $BESIDE_NAME: its CPU weight stays the default"
  fi
}

# cpu_mount [MOUNTS]: where the cgroup v1 "cpu" controller is mounted, alone or with others
# ("cpu,cpuacct" on many systems), from MOUNTS (/proc/self/mounts), printed; nothing without one.
cpu_mount() {
  local _ dir type options
  while read -r _ dir type options _; do
    if [[ $type == cgroup && ,$options, == *,cpu,* ]]; then
      echo "$dir"
      return
    fi
  done <"${1:-/proc/self/mounts}"
}

# beside_cgroup [MOUNTS]: a new cgroup v1 "cpu" group under this shell's own, printed, or nothing
# where none can be made. Its processes compete with this shell's as one weighted entity. First
# it removes the groups that runs killed by SIGKILL left there (their trap never ran): those of
# a pid no longer alive, with no process in them (rmdir takes only an empty group; a live run's
# group is never touched). MOUNTS as for cpu_mount.
beside_cgroup() {
  local own mount parent stale pid
  own=$(sed -n 's/^[0-9]*:\([^:]*,\)\{0,1\}cpu\(,[^:]*\)\{0,1\}:\(.*\)$/\3/p' /proc/self/cgroup)
  mount=$(cpu_mount "${1:-}")
  [[ -n $own && -n $mount ]] || return 0
  parent="$mount${own%/}"
  for stale in "$parent"/hutch-level-*; do
    pid=${stale##*/hutch-level-}
    if [[ -d $stale && $pid =~ ^[0-9]+$ && ! -d /proc/$pid ]] &&
      [[ -z $(cat "$stale/cgroup.procs" 2>/dev/null) ]]; then  # its size reads 0 even if not
      rmdir "$stale" 2>/dev/null || true
    fi
  done
  if mkdir "$parent/hutch-level-$$" 2>/dev/null; then
    echo "$parent/hutch-level-$$"
  fi
}
