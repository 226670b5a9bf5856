#!/usr/bin/env bash
# The test suite in two pytest runs side by side (ci/test.sh runs it):
#   bash ci/parts.sh N PYTEST-COMMAND... -- [pytest arguments]
# `PYTEST-COMMAND --part pools` runs every test that uses a real pool (and the docs' examples,
# which hold fixed ports) one at a time, in the background: they change the pools' queues and
# count their jobs (tests/conftest.py). `PYTEST-COMMAND --part rest -n N-1` runs the others in
# N-1 pytest-xdist workers. The arguments go to both (so not --junitxml: both would write
# it); the pools' output follows the rest's. The exit status is 0 when both parts passed, or
# one passed and the arguments left the other no test (pytest's exit 5); else 1 (5 when
# neither had a test). Stopped (a signal, or its own end), it interrupts both parts: Ctrl-C
# first, so each pytest tears its fixtures down, TERM after 20 s.
set -euo pipefail
workers=$1
shift
command=()
while [[ $# -gt 0 && $1 != -- ]]; do command+=("$1"); shift; done
[[ $# -gt 0 ]] && shift   # the --
log() { printf '[ci %s] %s\n' "$(date +%H:%M:%S)" "$*"; }

pools_pid=""
rest_pid=""
pools_log=$(mktemp)
stop_parts() {  # Ctrl-C first (each pytest tears its fixtures down), TERM after 20 s
    local pid tries
    for pid in $rest_pid $pools_pid; do
        kill -INT "$pid" 2>/dev/null || true
    done
    for pid in $rest_pid $pools_pid; do
        tries=0
        while kill -0 "$pid" 2>/dev/null && [[ $tries -lt 100 ]]; do
            sleep 0.2
            tries=$((tries + 1))
        done
        kill -TERM "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    done
    rm -f "$pools_log"
}
trap stop_parts EXIT
trap 'exit 143' TERM HUP
trap 'exit 130' INT

log "pytest: the pools' tests one at a time, beside the rest with $((workers - 1)) worker(s)"
"${command[@]}" --part pools "$@" > "$pools_log" 2>&1 &
pools_pid=$!
# (in the background too, so that a signal to this script is handled at once, not when the
# rest's pytest ends)
"${command[@]}" --part rest -n "$((workers - 1))" "$@" &
rest_pid=$!
rest_rc=0
wait "$rest_pid" || rest_rc=$?
rest_pid=""
pools_rc=0
wait "$pools_pid" || pools_rc=$?
pools_pid=""
log "the pools' part (exit $pools_rc; the rest: exit $rest_rc)"
cat "$pools_log"
if [[ $rest_rc -eq 5 && $pools_rc -eq 5 ]]; then
    log "failed: the arguments left neither part a test"
    exit 5
fi
if [[ $rest_rc -eq 5 && $pools_rc -eq 0 ]]; then rest_rc=0; fi  # (the arguments left it none)
if [[ $pools_rc -eq 5 && $rest_rc -eq 0 ]]; then pools_rc=0; fi
if [[ $rest_rc -ne 0 || $pools_rc -ne 0 ]]; then
    log "failed: the rest exit $rest_rc, the pools' part exit $pools_rc"
    exit 1
fi
