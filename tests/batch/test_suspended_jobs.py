"""A job the batch system suspends (preemption by suspension, an admin's ``scontrol
suspend``/``qmod -sj``/``condor_suspend``, a desktop pool's owner back at the keyboard) keeps
its slot and its worker, stopped: it resumes by itself when the system says so. It is no
eviction, no hold and no failure: the pool says it once, shows it as suspended with the
system's reason, counts it toward its target (a replacement would wait behind whatever
suspended it) and does not start its walltime again when it resumes.

Before, Slurm's and HTCondor's suspended job read as pending: it was counted as an eviction
(a warning that its tasks were rerun elsewhere), and its walltime clock started again when
it resumed; Grid Engine's read as held, with a warning to release or remove it.

The real Slurm, Grid Engine and HTCondor pools; every wait polls a condition.
"""

from __future__ import annotations

import logging
import subprocess

import dask
import htcondor2
import pytest

from hybrid import HybridCluster
from hybrid.batch.jobs import JobState
from tests.batch._tasks import square
from tests.batch.test_real_pools import wait_for
from tests.batch.test_restart_and_memory import QUICK, options, use_pool

pytestmark = pytest.mark.timeout(300)


def suspend(kind: str, job_id: str, resume: bool = False) -> None:
    """The batch system's own suspend (resume) of one job, as its admin would."""
    if kind == "htcondor":
        action = htcondor2.JobAction.Continue if resume else htcondor2.JobAction.Suspend
        htcondor2.Schedd().act(action, [job_id])
        return
    command = {"slurm": ["scontrol", "resume" if resume else "suspend", job_id],
               "sge": ["qmod", "-usj" if resume else "-sj", job_id]}[kind]
    subprocess.run(command, check=True, capture_output=True, timeout=60)


#: What each system's reason for the suspension says.
WHY = {"slurm": "scontrol suspend", "sge": "qmod -sj", "htcondor": "condor_suspend"}


def state_of(pool, job_id: str) -> JobState | None:
    status = pool.jobs.get(job_id)
    return status.state if status is not None else None


@pytest.mark.parametrize("kind", [
    pytest.param("slurm", marks=pytest.mark.slurm),
    pytest.param("sge", marks=pytest.mark.sge),
    pytest.param("htcondor", marks=pytest.mark.htcondor),
])
def test_a_suspended_job_is_said_shown_and_resumes_as_the_same_run(
        kind, request, staging, caplog) -> None:
    use_pool(kind, request)
    caplog.set_level(logging.INFO, logger="hybrid")
    with dask.config.set(QUICK), HybridCluster() as cluster:
        pool = cluster.add_pool("w", kind, nanny=False, **options(kind))
        cluster.scale(2)
        cluster.wait_for_workers(2, timeout=180, progress=False)
        victim = sorted(pool.jobs)[0]
        wait_for(lambda: state_of(pool, victim) is JobState.running, 60, "the job to run")
        started = pool._started[victim]
        suspend(kind, victim)
        wait_for(lambda: state_of(pool, victim) is JobState.suspended, 60,
                 f"the pool to see the suspension (it sees {state_of(pool, victim)})")
        status = cluster.pool_status()["w"]
        assert status.jobs["suspended"] == 1, status
        (reason,) = status.reasons["suspended"]
        assert WHY[kind] in reason, status.reasons
        assert f"1 suspended ({reason}: 1)" in status.summary()
        assert status.jobs["running"] == 1 and status.connected == 2  # (until worker-ttl)
        assert status.target == 2 and pool.evictions == 0 and pool.failures == 0
        suspend(kind, victim, resume=True)
        wait_for(lambda: state_of(pool, victim) is JobState.running, 60, "the job to resume")
        with cluster.get_client() as client:  # its worker serves again
            assert client.gather(client.map(square, range(4))) == [0, 1, 4, 9]
        assert pool._started[victim] == started  # the same run: its walltime goes on
        assert pool.evictions == 0 and pool.failures == 0 and pool.submit_calls == 1
        # scaled down while one job is suspended: that one goes (its stopped worker could
        # hand nothing over; a graceful retirement of it would wait for the worker-ttl)
        suspend(kind, victim)
        wait_for(lambda: state_of(pool, victim) is JobState.suspended, 60, "a second one")
        (other,) = set(pool.jobs) - {victim}
        cluster.scale(1)
        wait_for(lambda: victim not in pool.jobs, 60, "the suspended job to be removed")
        assert set(pool.jobs) == {other} and other not in pool.retiring
    # the close leaves no job in the queue (as the batch system itself lists them)
    wait_for(lambda: not [s for s in pool.system.query(cluster=cluster.name) if s.state.active],
             60, "the batch system to list none of the cluster's jobs")
    said = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    about = [line for line in said if f"job {victim} " in line]
    assert len(about) == 2 and f"job {victim} is suspended by {kind}" in about[0], said
    assert "goes on where it was when the job resumes" in about[0]
    assert not any(word in line for line in said
                   for word in ("evicted", "vacated", "requeued", "is held", "failure")), said
