#!/bin/sh
#BSUB -J "HybridCluster-demo-cpu[1-1]"
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
export DASK_DISTRIBUTED__WORKER__DAEMON=False
export DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT=60s
hybrid_suffix=$(printf '%s' "$HYBRID_JOB_ID" | tr -c 'A-Za-z0-9._-' '-')
exec /opt/hybrid/venv/bin/python -m dask worker tcp://10.1.2.3:8786 --nthreads 2 --resources 'GPU=0 notGPU=2' --nanny --death-timeout 60 --name demo-cpu-"$hybrid_suffix"
