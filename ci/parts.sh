#!/usr/bin/env bash
# The test suite as pytest runs side by side (ci/test.sh runs it):
#   bash ci/parts.sh N PYTEST-COMMAND... -- [pytest arguments]
# `PYTEST-COMMAND --part rest -n N-1` runs every test that uses no real pool in N-1
# pytest-xdist workers, in the background for the whole run. Beside it, the pools' part:
# every test that uses a real pool (and the docs' examples, which hold fixed ports) runs one
# at a time within its lane (`PYTEST-COMMAND --part pools --lane LANE`: tests/conftest.py's
# POOL_LANES), because such tests change a pool's queue and count its jobs. The phases run
# one after another; a phase is tracks side by side, a track one lane or lanes joined by `>`,
# run one after the other (`slurm>sge`: the Grid Engine lane once the Slurm lane has ended,
# as they share the cell and the namespaces). The tracks of a phase hold no pool (and no
# port) in common; the `alongside` lane holds nothing: its tests (marker `alongside`) use
# only their own jobs of the pools and no pool setting, so they run beside the lanes that
# use the same pools. HYBRID_POOL_LANES=0 runs the pools' part as one pytest instead
# (`--part pools`, no lane). The arguments go to every run (so not --junitxml: all would
# write it); each lane's pytest summary line is logged when its phase ends, its whole output
# follows the rest's, the lanes in the order PHASES names them. The exit status is 0 when every run
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
extra=("$@")  # (pytest's arguments, for every run)
log() { printf '[ci %s] %s\n' "$(date +%H:%M:%S)" "$*"; }

# The phases of the pools' part, each a list of tracks (tests/ci/test_parts.py checks that
# they are tests/conftest.py's POOL_PHASES).
PHASES=("htcondor slurm>sge alongside" "htcondor+slurm ports" "all")
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

runs=()     # "pools" or "pools/LANE", in the order PHASES names them
codes=()    # their exit statuses
for phase in "${PHASES[@]}"; do
    read -r -a lanes <<< "${phase//>/ }"
    runs+=("${lanes[@]}")
done
if [[ ${runs[*]} == - ]]; then runs=(pools); else runs=("${runs[@]/#/pools/}"); fi

start_lane() {  # start_lane TRACK RUN-INDEX: the run in the background; its pid in lane_pids
    local args=(--part pools)
    [[ ${runs[$2]} == pools ]] || args+=(--lane "${runs[$2]#pools/}")
    (trap - INT; exec setsid "${command[@]}" "${args[@]}" "${extra[@]}") > "$logs/$2" 2>&1 &
    lane_pids[$1]=$!
    lane_runs[$1]=$2
}

first=0     # the index of the phase's first run
for phase in "${PHASES[@]}"; do
    tracks=()
    read -r -a tracks <<< "$phase"
    lane_pids=()  # track -> the pid of its lane running now
    lane_runs=()  # track -> that lane's run index
    later=()      # track -> how many of its lanes are still to start
    index=$first
    for t in "${!tracks[@]}"; do
        read -r -a chain <<< "${tracks[$t]//>/ }"
        start_lane "$t" "$index"
        later[$t]=$(( ${#chain[@]} - 1 ))
        index=$(( index + ${#chain[@]} ))
    done
    while [[ ${#lane_pids[@]} -gt 0 ]]; do
        code=0
        wait -n -p ended "${lane_pids[@]}" || code=$?
        for t in "${!lane_pids[@]}"; do
            [[ ${lane_pids[$t]} == "$ended" ]] || continue
            codes[lane_runs[$t]]=$code
            unset "lane_pids[$t]"
            if [[ ${later[$t]} -gt 0 ]]; then  # the track's next lane
                later[$t]=$(( later[$t] - 1 ))
                start_lane "$t" $(( lane_runs[$t] + 1 ))
            fi
        done
    done
    echo  # (the rest's progress dots may have left the line open)
    for ((i = first; i < index; i++)); do  # (each lane's pytest summary, as it ends)
        log "${runs[$i]}: exit ${codes[$i]}: $(tail -n 1 "$logs/$i" 2>/dev/null)"
    done
    first=$index
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
