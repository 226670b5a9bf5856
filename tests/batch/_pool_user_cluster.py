"""Run by tests/batch/test_htcondor_job_files.py AS THE POOL'S JOB USER (see
``benchmarks.realpools.as_pool_user``): a HybridCluster with one HTCondor pool whose staging
directory lies in the pool's shared filesystem, two workers, a task, one worker killed;
then it reports, as JSON on stdout, what the workers and the schedd saw, which job output
files the staging directory held before and after, and what was left after ``close()``.

    python -m tests.batch._pool_user_cluster STAGING SHARED_DIR JOB_FILES [failing]

``failing``: instead, a pool whose jobs fail at once; it reports what ``wait_for_workers``
raised.
"""

from __future__ import annotations

import json
import os
import signal
import stat
import sys
import time
from pathlib import Path

import dask
import htcondor2

from hybrid import HybridCluster


def _settings(staging: str, shared: str, job_files: str) -> dict:
    return {"hybrid.batch.staging-directory": staging,
            "hybrid.batch.htcondor.shared-directories": [shared],
            "hybrid.batch.htcondor.job-files": job_files,
            "hybrid.scheduler.host": "127.0.0.1"}


def main(staging: str, shared: str, job_files: str) -> dict:
    out: dict = {}
    with dask.config.set(_settings(staging, shared, job_files)), \
            HybridCluster(security=True) as cluster:
        cluster.add_pool("cpu", "htcondor", memory="512 MiB", nanny=False)
        cluster.scale(2)
        cluster.wait_for_workers(2, timeout=150, progress=False)
        pool = cluster.pools["cpu"]
        directory = pool.staging.path
        with cluster.get_client() as client:
            out["sum"] = client.submit(sum, [1, 2, 3]).result()
            out["cwd"] = sorted(set(client.run(os.getcwd).values()))
            out["argv"] = list(client.run(lambda: sys.argv).values())
            out["uid"] = sorted(set(client.run(os.getuid).values()))
        out["staging"] = str(directory)
        out["files"] = {p.name: [stat.S_IMODE(p.stat().st_mode), p.stat().st_uid]
                        for p in directory.iterdir()}
        ads = htcondor2.Schedd().query(
            constraint=f'HybridCluster == "{cluster.name}"',
            projection=["ClusterId", "ProcId", "ShouldTransferFiles", "Iwd", "Owner",
                        "SUBMIT_Iwd"])
        out["ads"] = [{k: str(v) for k, v in ad.items()} for ad in ads]
        job_id = f"{ads[0]['ClusterId']}.{ads[0]['ProcId']}"
        log = pool.system.log_path(directory, job_id)
        out["log"] = str(log) if log else None
        out["log_text"] = log.read_text() if log and log.exists() else None
        out["uid_here"] = os.getuid()
        # one worker dies: its job ends (a failure), and its output is where hybrid looks
        out["logs_while_running"] = _logs(directory)
        with cluster.get_client() as client:
            victim = sorted(client.scheduler_info()["workers"])[0]
            os.kill(client.run(os.getpid, workers=[victim])[victim], signal.SIGKILL)
        deadline = time.monotonic() + 90
        while not _logs(directory) and time.monotonic() < deadline:
            time.sleep(0.2)
        out["logs_after_one_ended"] = _logs(directory)
        name = cluster.name
    out["left"] = len(htcondor2.Schedd().query(
        constraint=f'HybridCluster == "{name}" && JobStatus != 3 && JobStatus != 4',
        projection=["ProcId"]))
    out["staging_left"] = Path(out["staging"]).exists()
    return out


def failing(staging: str, shared: str, job_files: str) -> dict:
    """A pool whose jobs fail at once (a python that is not there): what the wait raised."""
    from hybrid.errors import PoolFailed

    out: dict = {"error": None}
    with dask.config.set(_settings(staging, shared, job_files)), \
            HybridCluster(security=True) as cluster:
        cluster.add_pool("cpu", "htcondor", memory="512 MiB", nanny=False,
                         python="/nonexistent/hybrid-test-python")
        cluster.scale(1)
        try:
            cluster.wait_for_workers(1, timeout=150, progress=False)
        except PoolFailed as error:
            out["error"] = str(error)
        name = cluster.name
    out["left"] = len(htcondor2.Schedd().query(
        constraint=f'HybridCluster == "{name}" && JobStatus != 3 && JobStatus != 4',
        projection=["ProcId"]))
    return out


def _logs(directory: Path) -> list[str]:
    """The job output files in the staging directory that hold something."""
    return sorted(p.name for p in directory.glob("worker-*.log") if p.stat().st_size)


if __name__ == "__main__":
    scenario = failing if sys.argv[4:5] == ["failing"] else main
    print(json.dumps(scenario(*sys.argv[1:4])))
