#!/usr/bin/env bash
# Kill what is left of a Slurm cluster's jobs after they ended: every process whose
# environment says SLURM_CLUSTER_NAME=<name> (slurmstepd gives each job's processes that
# variable; nothing else here carries it). With ProctrackType=proctrack/linuxproc, a job's
# process that was reparented to init escapes tracking, so scancel never reaches it (seen
# in CI: a dask-jobqueue worker of the benchmark tests alive an hour after its job).
# Usage: sweep-jobs.sh CLUSTER_NAME. TERM, then KILL after 5 s; looks again for processes
# started meanwhile (five rounds at most); says each pid; exits 0.
set -uo pipefail
name=${1:?usage: sweep-jobs.sh CLUSTER_NAME}

log() { echo "[slurm-sweep] $*"; }
# alive <pid>: the process exists and is not a zombie waiting for its parent
alive() {
    local stat
    stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
    [[ ${stat##*) } != Z* ]]
}

# find_left: the pids of the cluster's jobs' processes still alive, in `found`
find_left() {
    local dir pid
    found=()
    for dir in /proc/[0-9]*; do
        pid=${dir#/proc/}
        [[ $pid == "$$" || $pid == "$BASHPID" ]] && continue
        if grep -qzxF "SLURM_CLUSTER_NAME=$name" "$dir/environ" 2>/dev/null && alive "$pid"
        then
            found+=("$pid")
        fi
    done
}

# stop: TERM to every pid in `found`, KILL to those still alive after 5 s
stop() {
    local pid deadline left
    for pid in "${found[@]}"; do
        log "  $pid: $(tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null | cut -c1-160)"
        kill -TERM "$pid" 2>/dev/null || true
    done
    deadline=$(( $(date +%s) + 5 ))
    while (( $(date +%s) < deadline )); do
        left=0
        for pid in "${found[@]}"; do alive "$pid" && left=1; done
        (( left )) || return 0
        sleep 0.2
    done
    for pid in "${found[@]}"; do
        if alive "$pid"; then
            log "  $pid still alive after 5 s: SIGKILL"
            kill -KILL "$pid" 2>/dev/null || true
        fi
    done
}

# Until a look finds none (a process may start a child while its parent is being stopped;
# five rounds at most)
for round in 1 2 3 4 5; do
    find_left
    (( ${#found[@]} )) || exit 0
    if (( round == 1 )); then
        log "WARNING: processes of cluster $name's jobs left after the jobs ended, stopping them:"
    else
        log "started while the others were stopped:"
    fi
    stop
done
exit 0
