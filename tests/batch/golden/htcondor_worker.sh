#!/bin/bash
# Executable of an HTCondor worker job; its argument is $(ClusterId).$(ProcId).
HYBRID_JOB_ID="${1:?usage: worker.sh CLUSTER.PROC}"
export HYBRID_JOB_ID
# hybrid worker of cluster demo, pool gpu
umask 077
PATH="${PATH:-/usr/local/bin:/usr/bin:/bin}"
export PATH
hybrid_suffix=$(printf '%s' "$HYBRID_JOB_ID" | tr -c 'A-Za-z0-9._-' '-')
export DASK_DISTRIBUTED__WORKER__DAEMON=False
export DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT=60s
export DASK_DISTRIBUTED__COMM__TIMEOUTS__TCP=120s
export OE_LICENSE=/secrets/oe
chmod 600 ca.pem
chmod 600 cert.pem
chmod 600 key.pem
# --- setup commands given by the user ---
module load cuda
# --- end of setup commands ---
# The worker runs as this script's child: a removal (SIGTERM to this script) kills it and its
# processes at once, so the job leaves the queue without waiting for the worker's shutdown
# (hybrid retires workers through the scheduler before it removes their jobs).
hybrid_worker=
trap 'if [ -n "$hybrid_worker" ]; then kill -KILL $(cat /proc/"$hybrid_worker"/task/*/children 2>/dev/null) "$hybrid_worker" 2>/dev/null; fi; exit 143' TERM INT
/opt/venv/bin/python -m distributed.cli.dask_worker tls://gateway.example.org:8786 --nthreads 4 --memory-limit 17179869184 --resources 'GPU=1 notGPU=0' --tls-ca-file ca.pem --tls-cert cert.pem --tls-key key.pem --scheduler-sni daskgateway-demo --no-nanny --no-dashboard --worker-port 10000:10070 --death-timeout 60 --name demo-gpu-"$hybrid_suffix" &
hybrid_worker=$!
wait "$hybrid_worker"
