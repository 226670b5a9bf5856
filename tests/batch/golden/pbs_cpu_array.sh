#!/bin/sh
#PBS -N HybridCluster-demo-cpu
#PBS -J 1-3
#PBS -l select=1:ncpus=2:mem=4096mb
#PBS -l walltime=01:30:00
#PBS -v HYBRID_TAG=HybridCluster:demo:cpu:tcp://10.1.2.3:8786
#PBS -S /bin/sh
#PBS -o /scratch/hybrid/jobs/demo-pool-0a1b2c3d/
#PBS -j oe
HYBRID_JOB_ID="${PBS_JOBID}"
export HYBRID_JOB_ID
# hybrid worker of cluster demo, pool cpu
umask 077
PATH="${PATH:-/usr/local/bin:/usr/bin:/bin}"
export PATH
export DASK_DISTRIBUTED__WORKER__DAEMON=False
export DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT=60s
hybrid_suffix=$(printf '%s' "$HYBRID_JOB_ID" | tr -c 'A-Za-z0-9._-' '-')
exec /opt/hybrid/venv/bin/python -m dask worker tcp://10.1.2.3:8786 --nthreads 2 --resources 'GPU=0 notGPU=2' --nanny --death-timeout 60 --name demo-cpu-"$hybrid_suffix"
