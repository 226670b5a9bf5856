#!/bin/bash
# Executable of an HTCondor worker job; its argument is $(ClusterId).$(ProcId).
HYBRID_JOB_ID="${1:?usage: worker.sh CLUSTER.PROC}"
export HYBRID_JOB_ID
# hybrid worker of cluster demo, pool gpu
umask 077
PATH="${PATH:-/usr/local/bin:/usr/bin:/bin}"
export PATH
# (no process started for the job ids batch systems give, which need no change)
case $HYBRID_JOB_ID in
    *[!A-Za-z0-9._-]*) hybrid_suffix=$(printf '%s' "$HYBRID_JOB_ID" | tr -c 'A-Za-z0-9._-' '-') ;;
    *) hybrid_suffix=$HYBRID_JOB_ID ;;
esac
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
export DASK_DISTRIBUTED__COMM__TIMEOUTS__TCP=120s
export PYTHONHASHSEED=6640
export OE_LICENSE=/secrets/oe
chmod 600 ca.pem cert.pem key.pem
# --- setup commands given by the user ---
module load cuda
# --- end of setup commands ---
# The worker's scratch (its dask-scratch-space, spilled data) and its tasks' temporary files
# go to a directory of this job's own, removed when the job ends, however the worker ended
# (under the temporary directory Python would pick: a batch system's per-job one, where the
# system sets one, goes even after a SIGKILL, as Grid Engine's qdel sends).
hybrid_tmp=$(mktemp -d "${TMPDIR:-${TEMP:-${TMP:-/tmp}}}/hybrid-job-$hybrid_suffix.XXXXXX") && TMPDIR=$hybrid_tmp && export TMPDIR || hybrid_tmp=
# CUDA MPS (gpu_mps=auto): the job's GPU tasks share each GPU under one MPS daemon,
# started here with pipe and log directories private to this job, stopped after the worker.
hybrid_mps=
hybrid_mps_dir=
hybrid_mps_stop() {
    if [ -n "$hybrid_mps_dir" ]; then
        # quit; wait up to 5 s for the daemon (and the quit command) to end, then end them
        # and the servers the daemon started
        hybrid_mps_pid=$(cat "$CUDA_MPS_PIPE_DIRECTORY/nvidia-cuda-mps-control.pid" 2>/dev/null)
        echo quit | nvidia-cuda-mps-control >/dev/null 2>&1 &
        hybrid_quit=$!
        hybrid_i=0
        while [ "$hybrid_i" -lt 25 ] && { kill -0 "$hybrid_quit" 2>/dev/null || { [ -n "$hybrid_mps_pid" ] && kill -0 "$hybrid_mps_pid" 2>/dev/null; }; }; do
            sleep 0.2
            hybrid_i=$((hybrid_i + 1))
        done
        if [ -n "$hybrid_mps_pid" ] && kill -0 "$hybrid_mps_pid" 2>/dev/null; then
            echo "hybrid: the CUDA MPS daemon did not quit within 5 s: killing it and its servers" >&2
            kill -KILL "$hybrid_mps_pid" $(sed -n 's/.*Starting new server \([0-9][0-9]*\).*/\1/p' "$CUDA_MPS_LOG_DIRECTORY/control.log" 2>/dev/null) 2>/dev/null
        fi
        kill -KILL "$hybrid_quit" 2>/dev/null
        rm -rf "$hybrid_mps_dir"
        hybrid_mps_dir=
    fi
}
if [ -n "${CUDA_MPS_PIPE_DIRECTORY:-}" ] && [ -S "$CUDA_MPS_PIPE_DIRECTORY/control" ]; then
    hybrid_mps=site
    echo "hybrid: GPU tasks share the GPUs under the CUDA MPS daemon of $CUDA_MPS_PIPE_DIRECTORY" >&2
elif command -v nvidia-cuda-mps-control >/dev/null 2>&1; then
    hybrid_mps_dir=$(mktemp -d "${TMPDIR:-/tmp}/hybrid-mps.XXXXXX") || exit 1
    CUDA_MPS_PIPE_DIRECTORY=$hybrid_mps_dir/pipe
    CUDA_MPS_LOG_DIRECTORY=$hybrid_mps_dir/log
    export CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
    if mkdir -m 700 "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY" && nvidia-cuda-mps-control -d; then
        hybrid_mps=job
        echo "hybrid: GPU tasks share the GPUs under this job's CUDA MPS daemon ($hybrid_mps_dir)" >&2
    else
        echo "hybrid: nvidia-cuda-mps-control -d failed: GPU tasks do not share the GPUs" >&2
        rm -rf "$hybrid_mps_dir"
        hybrid_mps_dir=
        unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
    fi
fi
# The worker runs as this script's child: a removal (SIGTERM to this script) kills it and its
# processes at once, so the job leaves the queue without waiting for the worker's shutdown
# (hybrid retires workers through the scheduler before it removes their jobs).
hybrid_worker=
trap 'if [ -n "$hybrid_worker" ]; then kill -KILL $(cat /proc/"$hybrid_worker"/task/*/children 2>/dev/null) "$hybrid_worker" 2>/dev/null; fi; hybrid_mps_stop; [ -z "$hybrid_tmp" ] || rm -rf "$hybrid_tmp"; exit 143' TERM INT
if [ -n "$hybrid_mps" ]; then
/opt/venv/bin/python -m distributed.cli.dask_worker tls://gateway.example.org:8786 --nthreads 8 --memory-limit 17179869184 --resources 'GPU=8 notGPU=0' --tls-ca-file ca.pem --tls-cert cert.pem --tls-key key.pem --scheduler-sni daskgateway-demo --no-nanny --no-dashboard --worker-port 10000:10070 --death-timeout 60 --lifetime 21480s --lifetime-stagger 0s --name demo-gpu-"$hybrid_suffix" &
else
/opt/venv/bin/python -m distributed.cli.dask_worker tls://gateway.example.org:8786 --nthreads 1 --memory-limit 17179869184 --resources 'GPU=1 notGPU=0' --tls-ca-file ca.pem --tls-cert cert.pem --tls-key key.pem --scheduler-sni daskgateway-demo --no-nanny --no-dashboard --worker-port 10000:10070 --death-timeout 60 --lifetime 21480s --lifetime-stagger 0s --name demo-gpu-"$hybrid_suffix" &
fi
hybrid_worker=$!
# No nanny watches this worker's memory: this does what a nanny would (Dask's
# distributed.worker.memory.terminate): past 15938355 KiB resident (the worker's
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
        if [ "$hybrid_rss" -gt 15938355 ]; then
            echo "hybrid: the worker uses $hybrid_rss KiB, past 15938355 KiB (0.95 of its memory limit; distributed.worker.memory.terminate): killing it, as a nanny would" >&2
            kill -KILL $(cat /proc/"$hybrid_worker"/task/*/children 2>/dev/null) "$hybrid_worker" 2>/dev/null
            exit 0
        fi
        hybrid_pause 0.5
    done
) &
wait "$hybrid_worker"
hybrid_status=$?
hybrid_mps_stop
[ -z "$hybrid_tmp" ] || rm -rf "$hybrid_tmp"
exit "$hybrid_status"
