#!/usr/bin/env bash
# Stop the single-node CI Grid Engine started by up.sh.
#
# Deletes every job (every job in this CI cell is a test's), waits for them to leave, then
# SIGTERMs only the pids recorded in the state dir (sge_execd, then sge_qmaster -- never by
# name), waits, SIGKILLs those still alive, and kills the execd's own children (job
# shepherds) that outlived it. Removes the pid files; the cell and its spool stay for
# inspection (up.sh wipes them on its next cold start). Idempotent: exits 0 when nothing is up.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
SCRIPT=down
# shellcheck source-path=SCRIPTDIR source=common.sh
source "$HERE/common.sh"

TIMEOUT="${HYBRID_CI_SGE_TIMEOUT:-30}"
T0=$(date +%s.%N)
sge_env

qpid=$(recorded_pid "$RUN/qmaster.pid" sge_qmaster || true)
epid=$(recorded_pid "$RUN/execd.pid" sge_execd || true)
if [[ -z $epid ]] && f=$(execd_pidfile); then
    epid=$(recorded_pid "$f" sge_execd || true)
fi

# ---------------------------------------------------------------- jobs
if [[ -n $qpid ]] && command -v qstat >/dev/null; then
    jobs=$(cd /tmp && timeout 10 qstat -u '*' 2>/dev/null | awk 'NR > 2 { print $1 }' \
           | sort -u | tr '\n' ' ' || true)
    if [[ -n ${jobs// /} ]]; then
        log "qdel $jobs"
        # shellcheck disable=SC2086
        (cd /tmp && timeout 10 qdel -f $jobs >/dev/null 2>&1) || true
        deadline=$(( $(date +%s) + TIMEOUT ))
        while [[ -n "$(cd /tmp && timeout 10 qstat -u '*' 2>/dev/null || true)" ]] \
              && (( $(date +%s) < deadline )); do
            sleep 0.2
        done
    fi
fi

# ---------------------------------------------------------------- daemons
# Both at once: sge_qmaster alone takes about 9 s to shut down (its threads' timeouts).
if [[ -z $qpid && -z $epid ]]; then
    log "nothing up"
else
    shepherds=""
    declare -A NAMES=()
    if [[ -n $epid ]]; then
        shepherds=$(children_of "$epid" | tr '\n' ' ')
        NAMES[$epid]=sge_execd
    fi
    [[ -z $qpid ]] || NAMES[$qpid]=sge_qmaster
    for pid in "${!NAMES[@]}"; do
        log "SIGTERM ${NAMES[$pid]} ($pid)"
        kill -TERM "$pid" 2>/dev/null || true
    done
    deadline=$(( $(date +%s) + TIMEOUT ))
    for pid in "${!NAMES[@]}"; do
        while kill -0 "$pid" 2>/dev/null && (( $(date +%s) < deadline )); do
            sleep 0.1
        done
        if kill -0 "$pid" 2>/dev/null; then
            log "${NAMES[$pid]} ($pid) still alive after ${TIMEOUT}s: SIGKILL"
            kill -KILL "$pid" 2>/dev/null || true
        fi
    done
    # shepherds of jobs that did not leave (an execd stops without killing its jobs): their
    # process groups are the jobs' processes, started by our execd
    for pid in $shepherds; do
        if kill -0 "$pid" 2>/dev/null; then
            log "killing the job shepherd $pid left by sge_execd $epid, and its job"
            kill -KILL -- "-$pid" 2>/dev/null || true
            kill -KILL "$pid" 2>/dev/null || true
        fi
    done
fi
rm -f "$RUN/qmaster.pid" "$RUN/execd.pid" "$RUN/config.sha"
awk -v a="$T0" -v b="$(date +%s.%N)" 'BEGIN{printf "[sge-down] done in %.2f s\n", b-a}'
