#!/usr/bin/env bash
# The test suite as pytest runs side by side (ci/test.sh runs it):
#   bash ci/parts.sh N PYTEST-COMMAND... -- [pytest arguments]
# `PYTEST-COMMAND --part rest -n N-1` runs every test that uses no real pool in N-1
# pytest-xdist workers, in the background for the whole run. Beside it, the pools' part:
# every test that uses a real pool (and the docs' examples, which hold fixed ports) runs one
# at a time within its lane (`PYTEST-COMMAND --part pools --lane LANE`: tests/conftest.py's
# POOL_LANES), because such tests change a pool's queue and count its jobs; the lanes of a
# phase hold no pool (and no port) in common, so they run side by side, and the phases one
# after another. HYBRID_POOL_LANES=0 runs the pools' part as one pytest instead
# (`--part pools`, no lane). The arguments go to every run (so not --junitxml: all would
# write it); each lane's pytest summary line is logged when its phase ends, its whole output
# follows the rest's. The exit status is 0 when every run
# passed or was left no test by the arguments (pytest's exit 5) and at least one ran tests,
# 5 when none had a test, else 1. Each run is a session of its own (setsid): a Ctrl-C in the
# terminal reaches ci/test.sh, whose cleanup stops this script, and no run directly; each
# starts with Ctrl-C's default action (not ignored, as a background job's would be), so a
# stop that comes while its Python still starts ends it too. Stopped
# (a signal, or its own end), it interrupts every run still going with ONE Ctrl-C to its
# process group, as a terminal would (a second one could cut a fixture's teardown short;
# pytest-xdist's workers hear it too), and kills what is left of the group after 60 s.
set -euo pipefail
workers=$1
shift
command=()
while [[ $# -gt 0 && $1 != -- ]]; do command+=("$1"); shift; done
[[ $# -gt 0 ]] && shift   # the --
log() { printf '[ci %s] %s\n' "$(date +%H:%M:%S)" "$*"; }

# The phases of the pools' part, each a list of lanes (tests/ci/test_parts.py checks that
# they are tests/conftest.py's POOL_LANES, phase by phase).
PHASES=("htcondor slurm" "htcondor+slurm sge" "all")
if [[ ${HYBRID_POOL_LANES:-1} == 0 ]]; then PHASES=("-"); fi  # (one pytest, no --lane)

rest_pid=""
lane_pids=()
logs=$(mktemp -d)
stop_parts() {  # one Ctrl-C to each run's process group; KILL what is left after 60 s
    local pid tries
    trap '' INT TERM HUP  # (a second signal must not cut this short: the runs tear down)
    for pid in $rest_pid "${lane_pids[@]}"; do
        kill -INT -- "-$pid" 2>/dev/null || true
    done
    for pid in $rest_pid "${lane_pids[@]}"; do
        tries=0
        while kill -0 "$pid" 2>/dev/null && [[ $tries -lt 300 ]]; do
            sleep 0.2
            tries=$((tries + 1))
        done
        kill -KILL -- "-$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    done
    rm -rf "$logs"
}
trap stop_parts EXIT
trap 'exit 143' TERM HUP
trap 'exit 130' INT

log "pytest: the rest in $((workers - 1)) worker(s); beside it the pools' tests, one at a" \
    "time per lane, by phase: $(printf '[%s] ' "${PHASES[@]}")"
# (in the background, so that a signal to this script is handled at once, not when a
# pytest ends)
(trap - INT; exec setsid "${command[@]}" --part rest -n "$((workers - 1))" "$@") &
rest_pid=$!

runs=()     # "pools" or "pools/LANE", in order
codes=()    # their exit statuses
for phase in "${PHASES[@]}"; do
    lanes=()
    read -r -a lanes <<< "$phase"
    lane_pids=()
    for lane in "${lanes[@]}"; do
        if [[ $lane == - ]]; then
            args=(--part pools); name=pools
        else
            args=(--part pools --lane "$lane"); name="pools/$lane"
        fi
        (trap - INT; exec setsid "${command[@]}" "${args[@]}" "$@") > "$logs/${#runs[@]}" 2>&1 &
        lane_pids+=($!)
        runs+=("$name")
    done
    first=$(( ${#runs[@]} - ${#lanes[@]} ))
    for i in "${!lane_pids[@]}"; do
        code=0
        wait "${lane_pids[$i]}" || code=$?
        codes[first + i]=$code
    done
    lane_pids=()
    echo  # (the rest's progress dots may have left the line open)
    for ((i = first; i < ${#runs[@]}; i++)); do  # (each lane's pytest summary, as it ends)
        log "${runs[$i]}: exit ${codes[$i]}: $(tail -n 1 "$logs/$i" 2>/dev/null)"
    done
done

rest_rc=0
wait "$rest_pid" || rest_rc=$?
rest_pid=""
summary="the rest: exit $rest_rc"
for i in "${!runs[@]}"; do
    log "${runs[$i]} (exit ${codes[$i]}):"
    cat "$logs/$i"
    summary+="; ${runs[$i]}: exit ${codes[$i]}"
done
log "$summary"
ran=0
failed=0
for code in "$rest_rc" "${codes[@]}"; do
    case $code in
        0) ran=1 ;;
        5) ;;  # (the arguments left it no test)
        *) failed=1 ;;
    esac
done
if [[ $failed -ne 0 ]]; then
    log "failed: $summary"
    exit 1
fi
if [[ $ran -eq 0 ]]; then
    log "failed: the arguments left no run a test"
    exit 5
fi
