#!/bin/bash
#PBS -N HybridCluster-demo-cpu
#PBS -J 1-3
#PBS -l select=1:ncpus=2:mem=4096mb
#PBS -l walltime=01:30:00
#PBS -v HYBRID_TAG=HybridCluster:demo:cpu:tcp://10.1.2.3:8786
#PBS -S /bin/bash
#PBS -o /scratch/hybrid/jobs/demo-pool-0a1b2c3d/
#PBS -j oe
HYBRID_JOB_ID="${PBS_JOBID}"
export HYBRID_JOB_ID
# hybrid worker of cluster demo, pool cpu
umask 077
PATH="${PATH:-/usr/local/bin:/usr/bin:/bin}"
export PATH
hybrid_suffix=$(printf '%s' "$HYBRID_JOB_ID" | tr -c 'A-Za-z0-9._-' '-')
exec >>/scratch/hybrid/jobs/demo-pool-0a1b2c3d/worker-"$hybrid_suffix".log 2>&1
export DASK_DISTRIBUTED__WORKER__DAEMON=False
export DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT=60s
# The worker runs as this script's child: a removal (SIGTERM to this script) kills it and its
# processes at once, so the job leaves the queue without waiting for the worker's shutdown
# (hybrid retires workers through the scheduler before it removes their jobs).
hybrid_worker=
trap 'if [ -n "$hybrid_worker" ]; then kill -KILL $(cat /proc/"$hybrid_worker"/task/*/children 2>/dev/null) "$hybrid_worker" 2>/dev/null; fi; exit 143' TERM INT
/opt/hybrid/venv/bin/python -m distributed.cli.dask_worker tcp://10.1.2.3:8786 --nthreads 2 --memory-limit 4294967296 --resources 'GPU=0 notGPU=2' --no-nanny --no-dashboard --worker-port 10000:10070 --death-timeout 60 --lifetime 5340s --lifetime-stagger 0s --name demo-cpu-"$hybrid_suffix" &
hybrid_worker=$!
wait "$hybrid_worker"
