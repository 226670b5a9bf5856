#!/bin/bash
#SBATCH --job-name=HybridCluster-demo-gpu
#SBATCH --array=1-4
#SBATCH --ntasks=1
#SBATCH --cpus-per-task=4
#SBATCH --mem=16384M
#SBATCH --time=05:59:00
#SBATCH --gres=gpu:1
#SBATCH --partition=gpuq
#SBATCH --comment=HybridCluster:demo:gpu:tls://gateway.example.org:8786
#SBATCH --output=/home/alice/.cache/hybrid/jobs/demo-gpu-0123abcd/worker-%A_%a.log
#SBATCH --export=NIL
#SBATCH --chdir=/home/alice/.cache/hybrid/jobs/demo-gpu-0123abcd
#SBATCH --exclusive
HYBRID_JOB_ID="${SLURM_ARRAY_JOB_ID}_${SLURM_ARRAY_TASK_ID}"
export HYBRID_JOB_ID
# hybrid worker of cluster demo, pool gpu
umask 077
PATH="${PATH:-/usr/local/bin:/usr/bin:/bin}"
export PATH
hybrid_suffix=$(printf '%s' "$HYBRID_JOB_ID" | tr -c 'A-Za-z0-9._-' '-')
exec >>/home/alice/.cache/hybrid/jobs/demo-gpu-0123abcd/worker-"$hybrid_suffix".log 2>&1
export DASK_DISTRIBUTED__WORKER__DAEMON=False
export DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT=60s
export DASK_DISTRIBUTED__COMM__TIMEOUTS__TCP=120s
export OE_LICENSE=/secrets/oe
chmod 600 /home/alice/.cache/hybrid/jobs/demo-gpu-0123abcd/ca.pem
chmod 600 /home/alice/.cache/hybrid/jobs/demo-gpu-0123abcd/cert.pem
chmod 600 /home/alice/.cache/hybrid/jobs/demo-gpu-0123abcd/key.pem
# --- setup commands given by the user ---
module load cuda
# --- end of setup commands ---
# The worker runs as this script's child: a removal (SIGTERM to this script) kills it and its
# processes at once, so the job leaves the queue without waiting for the worker's shutdown
# (hybrid retires workers through the scheduler before it removes their jobs).
hybrid_worker=
trap 'if [ -n "$hybrid_worker" ]; then kill -KILL $(cat /proc/"$hybrid_worker"/task/*/children 2>/dev/null) "$hybrid_worker" 2>/dev/null; fi; exit 143' TERM INT
/opt/venv/bin/python -m distributed.cli.dask_worker tls://gateway.example.org:8786 --nthreads 4 --memory-limit 17179869184 --resources 'GPU=1 notGPU=0' --tls-ca-file /home/alice/.cache/hybrid/jobs/demo-gpu-0123abcd/ca.pem --tls-cert /home/alice/.cache/hybrid/jobs/demo-gpu-0123abcd/cert.pem --tls-key /home/alice/.cache/hybrid/jobs/demo-gpu-0123abcd/key.pem --scheduler-sni daskgateway-demo --no-nanny --no-dashboard --worker-port 10000:10070 --death-timeout 60 --name demo-gpu-"$hybrid_suffix" &
hybrid_worker=$!
wait "$hybrid_worker"
