#!/bin/bash
#PBS -N HybridCluster-demo-gpu
#PBS -J 1-2
#PBS -l select=1:ncpus=4:mem=16385mb:ngpus=2
#PBS -l walltime=06:30:00
#PBS -q gpuq
#PBS -A proj-7
#PBS -v HYBRID_TAG=HybridCluster:demo:gpu:tcp://10.1.2.3:8786
#PBS -S /bin/bash
#PBS -o /scratch/hybrid/jobs/demo-pool-0a1b2c3d/
#PBS -j oe
#PBS -l place=excl
#PBS -W group_list=chem
HYBRID_JOB_ID="${PBS_JOBID}"
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
exec >>/scratch/hybrid/jobs/demo-pool-0a1b2c3d/worker-"$hybrid_suffix".log 2>&1
# As a nanny does for its worker (distributed.nanny.pre-spawn-environ), where not set already:
[ -n "${MALLOC_TRIM_THRESHOLD_+set}" ] || MALLOC_TRIM_THRESHOLD_=65536
export MALLOC_TRIM_THRESHOLD_
[ -n "${MKL_NUM_THREADS+set}" ] || MKL_NUM_THREADS=1
export MKL_NUM_THREADS
[ -n "${OPENBLAS_NUM_THREADS+set}" ] || OPENBLAS_NUM_THREADS=1
export OPENBLAS_NUM_THREADS
export DASK_DISTRIBUTED__WORKER__DAEMON=False
export DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT=60s
export PYTHONHASHSEED=6640
export OMP_NUM_THREADS=4
# --- setup commands given by the user ---
module load cuda/12.2
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
/opt/hybrid/venv/bin/python -m distributed.cli.dask_worker tcp://10.1.2.3:8786 --nthreads 1 --nworkers 16 --memory-limit 1073741824 --resources 'GPU=1 notGPU=0' --nanny --no-dashboard --worker-port 10000:10070 --nanny-port 10071:10140 --death-timeout 60 --lifetime 23340s --lifetime-stagger 0s --name demo-gpu-"$hybrid_suffix" &
else
/opt/hybrid/venv/bin/python -m distributed.cli.dask_worker tcp://10.1.2.3:8786 --nthreads 1 --nworkers 2 --memory-limit 8589934592 --resources 'GPU=1 notGPU=0' --nanny --no-dashboard --worker-port 10000:10070 --nanny-port 10071:10140 --death-timeout 60 --lifetime 23340s --lifetime-stagger 0s --name demo-gpu-"$hybrid_suffix" &
fi
hybrid_worker=$!
wait "$hybrid_worker"
hybrid_status=$?
hybrid_mps_stop
[ -z "$hybrid_tmp" ] || rm -rf "$hybrid_tmp"
exit "$hybrid_status"
