"""``close()`` while the batch system's listing fails (a busy ``slurmctld`` whose ``squeue``
times out; ``scancel`` still works): the jobs the pool tracks are removed all the same (a
pending one would otherwise start later for a scheduler that is gone), and the close says
what it could not confirm.

The real Slurm; ``squeue`` is a TEST DOUBLE put first on ``PATH`` (it fails as a busy
controller's does, for the first calls or for every call), the real one counts what is left.
"""

from __future__ import annotations

import subprocess

import dask
import pytest

from hybrid import HybridCluster
from hybrid.errors import CleanupFailed
from tests.batch.test_real_pools import slurm_jobs, wait_for
from tests.batch.test_restart_and_memory import QUICK

pytestmark = [pytest.mark.slurm, pytest.mark.timeout(300)]

#: A squeue that fails as a busy controller's does, the first ``$1`` times (``-1``: always),
#: then runs the real one. A TEST DOUBLE.
FAILING_SQUEUE = """#!/bin/sh
count_file={count}
n=$(cat "$count_file" 2>/dev/null || echo 0)
echo $((n + 1)) > "$count_file"
if [ {failures} -lt 0 ] || [ "$n" -lt {failures} ]; then
    echo "squeue: error: slurm_load_jobs error: Socket timed out on send/recv operation" >&2
    exit 1
fi
exec {real} "$@"
"""


def _failing_squeue(tmp_path, monkeypatch, failures: int) -> None:
    real = subprocess.run(["sh", "-c", "command -v squeue"], capture_output=True, text=True,
                          check=True).stdout.strip()
    shims = tmp_path / "shims"
    shims.mkdir()
    shim = shims / "squeue"
    shim.write_text(FAILING_SQUEUE.format(count=tmp_path / "squeue-calls", failures=failures,
                                          real=real))
    shim.chmod(0o755)
    monkeypatch.setenv("PATH", f"{shims}:{__import__('os').environ['PATH']}")


@pytest.mark.parametrize("failures", [2, -1], ids=["for-a-while", "always"])
def test_close_removes_the_jobs_it_tracks_when_the_listing_fails(
        failures, slurm_cluster, staging, tmp_path, monkeypatch) -> None:
    with dask.config.set(QUICK):
        cluster = HybridCluster()
        try:
            # jobs that wait (a begin time): nothing ends them but a removal
            cluster.add_pool("w", "slurm", nanny=False, walltime="00:15",
                             job_extra_directives=["--begin=now+1hour"])
            cluster.scale(2)
            wait_for(lambda: len(slurm_jobs(cluster.name)) == 2, 60,
                     "the real squeue to list the two pending jobs")
            with monkeypatch.context() as patch:
                _failing_squeue(tmp_path, patch, failures)
                if failures < 0:
                    with pytest.raises(CleanupFailed, match="Socket timed out"):
                        cluster.close()
                else:
                    cluster.close()
            wait_for(lambda: not slurm_jobs(cluster.name), 30,
                     "the real squeue to list none of the cluster's jobs")
        finally:
            if slurm_jobs(cluster.name):  # (before the fix: they ran on)
                subprocess.run(["scancel", *slurm_jobs(cluster.name)], capture_output=True)
            cluster.close()


@pytest.mark.parametrize("failures", [2, -1], ids=["for-a-while", "always"])
def test_hybrid_cancel_of_a_cluster_asks_a_failing_listing_again(
        failures, slurm_cluster, staging, tmp_path, monkeypatch) -> None:
    """``hybrid cancel --cluster`` finds the jobs by listing them (it tracks none): one
    timed-out ``squeue`` made it remove nothing. It asks again, as a close does; a listing
    that keeps failing is said with how to go on, and nothing is half done."""
    import os
    import sys
    from pathlib import Path

    hybrid = str(Path(sys.executable).with_name("hybrid"))
    with dask.config.set(QUICK), HybridCluster() as cluster:
        cluster.add_pool("w", "slurm", nanny=False, walltime="00:15",
                         job_extra_directives=["--begin=now+1hour"])
        cluster.scale(2)
        wait_for(lambda: len(slurm_jobs(cluster.name)) == 2, 60, "two pending jobs")
        with monkeypatch.context() as patch:
            _failing_squeue(tmp_path, patch, failures)
            done = subprocess.run([hybrid, "cancel", "--system", "slurm", "--cluster",
                                   cluster.name], capture_output=True, text=True, timeout=120,
                                  env=dict(os.environ))
        if failures < 0:
            assert done.returncode != 0, done.stdout
            assert "Socket timed out" in done.stderr and "3 times" in done.stderr, done.stderr
            assert f"hybrid status --system slurm --cluster {cluster.name}" in done.stderr
            assert len(slurm_jobs(cluster.name)) == 2  # (the cluster's own close removes them)
        else:
            assert done.returncode == 0, done.stderr
            assert "removed 2 job(s)" in done.stdout, done.stdout
            wait_for(lambda: not slurm_jobs(cluster.name), 30, "no job of the cluster left")
