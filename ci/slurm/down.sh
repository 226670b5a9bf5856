#!/usr/bin/env bash
# Stop the single-node CI Slurm started by up.sh.
#
# Cancels all jobs (every job on the CI machine is ours), stops what is left of
# them (sweep-jobs.sh: processes carrying this cluster's SLURM_CLUSTER_NAME), then
# SIGTERMs only the pids recorded in the state dir (slurmd, slurmctld, munged --
# never by name), waits, SIGKILLs those still alive, removes the pid files.
# Idempotent: exits 0 when nothing is up.
set -euo pipefail

STATE="${HYBRID_CI_STATE:-/var/tmp/hybrid-ci}/slurm"
TIMEOUT="${HYBRID_CI_SLURM_TIMEOUT:-30}"
RUN="$STATE/run"
MUNGE_DIR="$STATE/munge"
T0=$(date +%s.%N)

log() { echo "[slurm-down] $*"; }
# recorded_pid <pidfile> <comm>: print the pid if it is alive and is that program
recorded_pid() {
    local pidfile=$1 comm=$2 pid
    [[ -s $pidfile ]] || return 1
    pid=$(tr -dc '0-9' <"$pidfile")
    [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null || return 1
    [[ "$(cat "/proc/$pid/comm" 2>/dev/null)" == "$comm" ]] || return 1
    echo "$pid"
}

# ---------------------------------------------------------------- jobs
if recorded_pid "$RUN/slurmctld.pid" slurmctld >/dev/null \
   && command -v scontrol >/dev/null \
   && timeout 10 scontrol ping 2>/dev/null | grep -q 'is UP'; then
    jobs=$(timeout 10 squeue -h -o '%F' 2>/dev/null | sort -u | tr '\n' ' ' || true)
    if [[ -n ${jobs// /} ]]; then
        log "scancel $jobs"
        # shellcheck disable=SC2086
        timeout 10 scancel $jobs || true
        # give slurmd time to kill the job steps before it goes away
        deadline=$(( $(date +%s) + TIMEOUT ))
        while [[ -n "$(timeout 10 squeue -h -t PD,R,CG,S,CF -o '%i' 2>/dev/null || true)" ]] \
              && (( $(date +%s) < deadline )); do
            sleep 0.5
        done
    fi
fi

# what scancel did not reach (a job's process reparented to init): the ClusterName that
# up.sh wrote in the config of the Slurm this stops
CLUSTER=$(sed -n 's/^ClusterName=//p' /etc/slurm/slurm.conf 2>/dev/null | head -n 1 || true)
if [[ -n $CLUSTER ]]; then
    bash "$(dirname "${BASH_SOURCE[0]}")/sweep-jobs.sh" "$CLUSTER" || true
fi

# ---------------------------------------------------------------- daemons
declare -A PIDS=()
for spec in "slurmd:$RUN/slurmd.pid" "slurmctld:$RUN/slurmctld.pid" "munged:$MUNGE_DIR/munged.pid"; do
    name=${spec%%:*}; file=${spec#*:}
    if pid=$(recorded_pid "$file" "$name"); then
        PIDS[$name]=$pid
    fi
done

# stop_group <name...>: SIGTERM those recorded daemons, wait up to TIMEOUT,
# SIGKILL the ones still alive
stop_group() {
    local name pid alive pids=() deadline
    for name in "$@"; do
        [[ -n ${PIDS[$name]:-} ]] || continue
        log "SIGTERM $name (${PIDS[$name]})"
        kill -TERM "${PIDS[$name]}" 2>/dev/null || true
        pids+=("${PIDS[$name]}")
    done
    deadline=$(( $(date +%s) + TIMEOUT ))
    while (( $(date +%s) < deadline )); do
        alive=0
        for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && alive=1; done
        (( alive )) || return 0
        sleep 0.2
    done
    for name in "$@"; do
        [[ -n ${PIDS[$name]:-} ]] || continue
        if kill -0 "${PIDS[$name]}" 2>/dev/null; then
            log "$name (${PIDS[$name]}) still alive after ${TIMEOUT}s: SIGKILL"
            kill -KILL "${PIDS[$name]}" 2>/dev/null || true
        fi
    done
    sleep 0.5  # let the kernel reap them before pid files go
}

if [[ ${#PIDS[@]} -eq 0 ]]; then
    log "nothing up"
else
    # Slurm daemons together, munged last (both need it to talk to each other)
    stop_group slurmd slurmctld
    stop_group munged
fi
rm -f "$RUN/slurmd.pid" "$RUN/slurmctld.pid" "$MUNGE_DIR/munged.pid"
awk -v a="$T0" -v b="$(date +%s.%N)" 'BEGIN{printf "[slurm-down] done in %.2f s\n", b-a}'
