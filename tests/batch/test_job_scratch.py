"""A batch job's scratch goes with the job, however its worker ends.

A worker keeps its spilled data in ``dask-scratch-space`` under the temporary directory, and
a task's own temporary files go there too. When a job is removed at work (a walltime's end,
``scancel``, ``qdel``, hybrid's own removal), its script kills the worker at once, so the
worker never cleans up after itself: on a node whose ``/tmp`` is shared by every job, that
is left behind. Each job script gives its worker a temporary directory of its own and
removes it when the job ends, by removal or by itself. Grid Engine's ``qdel`` kills the
script outright (SIGKILL), so there the directory is made inside the per-job one Grid
Engine sets (``TMP``) and removes itself.

The real Slurm and Grid Engine pools, and the PBS and LSF TEST DOUBLES (which run their jobs
as local processes). The local pool has its own per-job directory (hybrid/batch/local.py);
HTCondor runs each job in a sandbox that it removes itself, inside the CI pool's chroot.
"""

from __future__ import annotations

import os
import uuid

import dask
import pytest

from hybrid import HybridCluster
from tests.batch._restart import active_jobs
from tests.batch._tasks import fill_scratch
from tests.batch.test_real_pools import wait_for
from tests.batch.test_restart_and_memory import (
    QUICK,
    doubles,  # noqa: F401  (a fixture)
    options,
    use_pool,
)

pytestmark = pytest.mark.timeout(600)

KINDS = ["local", "pbs", "lsf",
         pytest.param("slurm", marks=pytest.mark.slurm),
         pytest.param("sge", marks=pytest.mark.sge)]


def _scratch_of(client, name: str, seconds: float):
    """Run :func:`fill_scratch` on the one worker; its future and the two paths it wrote."""
    future = client.submit(fill_scratch, name, seconds, pure=False)
    events: list = []

    def written() -> bool:
        events[:] = client.get_events("hybrid-scratch")
        return bool(events)

    wait_for(written, 120, "the task to write its scratch files")
    paths = list(events[-1][1])
    assert all(os.path.exists(p) for p in paths), paths  # the test sees the job's files
    return future, paths


@pytest.mark.parametrize("ending", ["removed at work", "ended by itself"])
@pytest.mark.parametrize("kind", KINDS)
def test_a_job_leaves_no_scratch(kind, ending, request, staging) -> None:
    use_pool(kind, request)
    name = f"hybrid-scratch-{uuid.uuid4().hex[:8]}"
    removed = ending == "removed at work"
    with dask.config.set(QUICK), HybridCluster() as cluster:
        cluster.add_pool("w", kind, nanny=False, **options(kind))
        cluster.scale(1, wait=True, timeout=180)
        with cluster.get_client(set_as_default=False) as client:
            future, paths = _scratch_of(client, name, 600 if removed else 0)
            if removed:  # as scancel/qdel: the job ends at work
                [job] = active_jobs(cluster, "w")
                cluster.pools["w"].system.remove([job])
            else:
                assert future.result(timeout=60) == paths
                del future  # (a worker holding the only copy of a result is not retired)
                cluster.scale(0)  # the worker retires; its job ends by itself
                wait_for(lambda: not active_jobs(cluster, "w"), 120, "the job to end")
            wait_for(lambda: not any(os.path.exists(p) for p in paths), 60,
                     f"the job's scratch to go ({ending}): {paths}")
