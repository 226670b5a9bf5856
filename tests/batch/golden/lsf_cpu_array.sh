#!/bin/bash
#BSUB -J "HybridCluster-demo-cpu[1-3]"
#BSUB -Jd "HybridCluster:demo:cpu:tcp://10.1.2.3:8786"
#BSUB -n 2
#BSUB -R "span[hosts=1]"
#BSUB -M 4096MB
#BSUB -R "rusage[mem=4096MB]"
#BSUB -W 01:30
#BSUB -o /scratch/hybrid/jobs/demo-pool-0a1b2c3d/worker-%J_%I.log
HYBRID_JOB_ID="${LSB_JOBID}[${LSB_JOBINDEX}]"
export HYBRID_JOB_ID
# hybrid worker of cluster demo, pool cpu
umask 077
PATH="${PATH:-/usr/local/bin:/usr/bin:/bin}"
export PATH
# (no process started for the job ids batch systems give, which need no change)
case $HYBRID_JOB_ID in
    *[!A-Za-z0-9._-]*) hybrid_suffix=$(printf '%s' "$HYBRID_JOB_ID" | tr -c 'A-Za-z0-9._-' '-') ;;
    *) hybrid_suffix=$HYBRID_JOB_ID ;;
esac
exec >>/scratch/hybrid/jobs/demo-pool-0a1b2c3d/worker-"$hybrid_suffix".log 2>&1
# As a nanny does for its worker (distributed.nanny.pre-spawn-environ), where not set already:
[ -n "${MALLOC_TRIM_THRESHOLD_+set}" ] || MALLOC_TRIM_THRESHOLD_=65536
export MALLOC_TRIM_THRESHOLD_
[ -n "${OMP_NUM_THREADS+set}" ] || OMP_NUM_THREADS=1
export OMP_NUM_THREADS
[ -n "${MKL_NUM_THREADS+set}" ] || MKL_NUM_THREADS=1
export MKL_NUM_THREADS
[ -n "${OPENBLAS_NUM_THREADS+set}" ] || OPENBLAS_NUM_THREADS=1
export OPENBLAS_NUM_THREADS
export DASK_DISTRIBUTED__WORKER__DAEMON=False
export DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT=60s
export PYTHONHASHSEED=6640
# The worker's scratch (its dask-scratch-space, spilled data) and its tasks' temporary files
# go to a directory of this job's own, removed when the job ends, however the worker ended
# (under the temporary directory Python would pick: a batch system's per-job one, where the
# system sets one, goes even after a SIGKILL, as Grid Engine's qdel sends).
hybrid_tmp=$(mktemp -d "${TMPDIR:-${TEMP:-${TMP:-/tmp}}}/hybrid-job-$hybrid_suffix.XXXXXX") && TMPDIR=$hybrid_tmp && export TMPDIR || hybrid_tmp=
# The worker runs as this script's child: a removal (SIGTERM to this script) kills it and its
# processes at once, so the job leaves the queue without waiting for the worker's shutdown
# (hybrid retires workers through the scheduler before it removes their jobs).
hybrid_worker=
trap 'if [ -n "$hybrid_worker" ]; then kill -KILL $(cat /proc/"$hybrid_worker"/task/*/children 2>/dev/null) "$hybrid_worker" 2>/dev/null; fi; [ -z "$hybrid_tmp" ] || rm -rf "$hybrid_tmp"; exit 143' TERM INT
/opt/hybrid/venv/bin/python -m distributed.cli.dask_worker tcp://10.1.2.3:8786 --nthreads 2 --memory-limit 4294967296 --resources 'GPU=0 notGPU=2' --no-nanny --no-dashboard --worker-port 10000:10070 --death-timeout 60 --lifetime 5340s --lifetime-stagger 0s --name demo-cpu-"$hybrid_suffix" &
hybrid_worker=$!
# No nanny watches this worker's memory: this does what a nanny would (Dask's
# distributed.worker.memory.terminate): past 3984588 KiB resident (the worker's
# process and its children) it kills the worker, its tasks are retried elsewhere as after any
# lost worker, the job ends and its pool submits a replacement.
# (POSIX sh: some batch systems run job scripts with /bin/sh whatever their first line says.
# Each turn costs a few reads of /proc; under bash the half-second wait is the read builtin on
# a pipe that never gets data, not a sleep process per turn, which competes for the CPU while
# many workers start on one node. The first turn comes a second after the worker started:
# the worker is mostly importing then, and the watch starts no process beside it.)
(
    hybrid_pause() { sleep "$1"; }
    case ${BASH_VERSION:-} in
        [4-9].*|[1-9][0-9]*)
            if eval 'exec 9<> <(:)' 2>/dev/null; then
                hybrid_pause() {
                    read -r -t "$1" -u 9 hybrid_none
                    [ "$?" -gt 128 ] || sleep "$1"
                }
            fi ;;
    esac
    hybrid_pause 1
    hybrid_page_kib=$(( $(getconf PAGESIZE 2>/dev/null || echo 4096) / 1024 ))
    while kill -0 "$hybrid_worker" 2>/dev/null; do
        hybrid_rss=0 hybrid_queue=$hybrid_worker
        while [ -n "$hybrid_queue" ]; do
            hybrid_pid=${hybrid_queue%% *}
            hybrid_queue=${hybrid_queue#"$hybrid_pid"}
            hybrid_queue=${hybrid_queue# }
            {
                if read -r hybrid_size hybrid_pages hybrid_rest < /proc/"$hybrid_pid"/statm; then
                    hybrid_rss=$((hybrid_rss + hybrid_pages * hybrid_page_kib))
                fi
                for hybrid_children in /proc/"$hybrid_pid"/task/*/children; do
                    hybrid_kids=
                    read -r hybrid_kids < "$hybrid_children" || true
                    [ -n "$hybrid_kids" ] && hybrid_queue="${hybrid_queue:+$hybrid_queue }$hybrid_kids"
                done
            } 2>/dev/null
        done
        if [ "$hybrid_rss" -gt 3984588 ]; then
            echo "hybrid: the worker uses $hybrid_rss KiB, past 3984588 KiB (0.95 of its memory limit; distributed.worker.memory.terminate): killing it, as a nanny would" >&2
            kill -KILL $(cat /proc/"$hybrid_worker"/task/*/children 2>/dev/null) "$hybrid_worker" 2>/dev/null
            exit 0
        fi
        hybrid_pause 0.5
    done
) &
wait "$hybrid_worker"
hybrid_status=$?
[ -z "$hybrid_tmp" ] || rm -rf "$hybrid_tmp"
exit "$hybrid_status"
