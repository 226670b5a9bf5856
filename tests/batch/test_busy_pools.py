"""A busy facility on the REAL pools: queues that wait, walltimes that end, evictions, pools
that differ.

The CI pools wait with their own mechanisms, opt-in per job (ci/slurm/up.sh, ci/htcondor/up.sh;
docs/ci-pools.md): Slurm's partition ``busy`` runs at most two one-CPU jobs (the rest pend with
the reason Resources), ``--begin`` makes a job wait (BeginTime) and ``scontrol requeue`` puts
a running job back in the queue; HTCondor's ``concurrency_limits = hybrid_ci_busy`` lets two
such jobs run at once (the rest stay idle, "concurrency limit hybrid_ci_busy reached") and
``condor_vacate_job`` (``Schedd.act(Vacate)``) evicts a running job. Every wait here polls a
condition with a deadline.
"""

from __future__ import annotations

import logging
import os
import subprocess
import time

import dask
import htcondor2
import pytest
from distributed import Event

from hybrid import HybridCluster
from tests.batch._tasks import held_until, recorded_work, runs_per_key, square, started_held
from tests.batch.test_real_pools import condor_jobs, slurm_jobs, wait_for

BUSY = os.environ.get("HYBRID_CI_SLURM_BUSY_PARTITION", "busy")
FAST_POLLS = {"hybrid.batch.poll-interval": "1s"}


def job_logs(pool) -> str:
    """The pool's job logs as they are now (staging goes when the cluster closes): what a
    failed assertion shows."""
    logs = sorted(pool.staging.path.glob("worker-*.log")) if pool.staging is not None else []
    return "\n".join(f"--- {log.name}\n{log.read_text(errors='replace')[-3000:]}"
                     for log in logs) or "(no job log)"


def slurm_states(cluster: str) -> dict[str, str]:
    """Job id -> Slurm state of the cluster's active jobs, as squeue lists them now."""
    out = subprocess.run(["squeue", "--noheader", "--array", "--format=%i|%T|%k"],
                         capture_output=True, text=True, check=True).stdout
    states = {}
    for line in out.splitlines():
        job_id, state, comment = line.split("|", 2)
        if comment.startswith(f"HybridCluster:{cluster}:") and state in (
                "PENDING", "RUNNING", "CONFIGURING", "COMPLETING"):
            states[job_id] = state
    return states


@pytest.mark.slurm
@pytest.mark.timeout(300)
def test_adaptive_on_a_busy_partition_submits_once_counts_pending_and_drops_pending_first(
        slurm_cluster, staging) -> None:
    most = 0

    def jobs() -> dict[str, str]:
        nonlocal most
        states = slurm_states(cluster.name)
        most = max(most, len(states))
        return states

    with dask.config.set(FAST_POLLS), HybridCluster() as cluster:
        pool = cluster.add_pool("cpu", "slurm", cores=1, memory="256 MiB", walltime="00:10",
                                nanny=False, queue=BUSY)
        adaptive = cluster.adapt(pool="cpu", minimum=0, maximum=5, interval="1s",
                                 wait_count=2)
        with cluster.get_client() as client:
            release = Event(f"release-{cluster.name}", client=client)
            futures = [client.submit(held_until, release.name, i, pure=False)
                       for i in range(5)]
            # five tasks, no worker yet: five jobs in one submission; two slots run them
            wait_for(lambda: list(jobs().values()).count("RUNNING") == 2
                     and list(jobs().values()).count("PENDING") == 3, 120,
                     "two jobs running and three pending in the busy partition")
            wait_for(lambda: cluster.pool_status()["cpu"].jobs["running"] == 2, 30,
                     "the pool to see them (its next refresh)")
            # Slurm gives pending array tasks their reason at a scheduling pass, which may
            # come after they are seen pending (reason None): wait for it, assume nothing
            wait_for(lambda: cluster.pool_status()["cpu"].reasons.get("pending"), 60,
                     "the pool to see why its jobs pend (Slurm's next scheduling pass)")
            status = cluster.pool_status()["cpu"]
            assert pool.submit_calls == 1
            assert status.jobs["pending"] == 3 and status.jobs["running"] == 2
            assert set(status.reasons["pending"]) <= {"Resources", "Priority"}, status
            assert "3 pending (" in status.summary() and "pending" in repr(cluster)
            # the pending jobs are workers on their way: more steps submit nothing
            steps = adaptive.steps
            wait_for(lambda: adaptive.steps >= steps + 5, 60, "five more adaptive steps")
            assert pool.submit_calls == 1 and len(jobs()) == 5
            # three tasks are no longer wanted: demand 2; the pending jobs go, not a worker
            running = {j for j, s in jobs().items() if s == "RUNNING"}
            wait_for(lambda: len(started_held(client)) == 2, 60, "two tasks to start")
            started = started_held(client)
            client.cancel([f for i, f in enumerate(futures) if i not in started])
            wait_for(lambda: set(jobs()) == running, 90,
                     "the three pending jobs to be removed, the two running kept")
            steps = adaptive.steps
            wait_for(lambda: adaptive.steps >= steps + 3, 60, "three more adaptive steps")
            assert set(jobs()) == running
            release.set()
            assert sorted(client.gather([futures[i] for i in started])) == sorted(started)
            assert pool.submit_calls == 1
        assert adaptive.errors == []
    assert most <= 5  # never more than maximum jobs queued and running
    assert slurm_jobs(cluster.name) == []


@pytest.mark.slurm
@pytest.mark.timeout(300)
def test_a_requeued_slurm_job_is_an_eviction_not_a_failure_and_its_task_reruns(
        slurm_cluster, staging, caplog) -> None:
    caplog.set_level(logging.INFO, logger="hybrid")
    with dask.config.set(FAST_POLLS), HybridCluster() as cluster:
        pool = cluster.add_pool("cpu", "slurm", cores=1, memory="256 MiB", walltime="00:10",
                                nanny=False)
        cluster.scale(2)
        cluster.wait_for_workers(2, timeout=120, progress=False)
        with cluster.get_client() as client:
            futures = client.map(recorded_work, range(2), [8.0, 8.0], pure=False)
            wait_for(lambda: len(runs_per_key(client)) == 2, 60,
                     "both tasks to run, one on each worker")
            victim = sorted(pool.jobs)[0]
            subprocess.run(["scontrol", "requeue", victim], check=True)
            wait_for(lambda: pool.evictions == 1, 60, "the requeue to be seen as an eviction")
            status = cluster.pool_status()["cpu"]
            # back in the queue, waiting as Slurm makes a requeued job wait: it counts toward
            # the target, so nothing else is submitted for it
            assert status.jobs["pending"] == 1 and "BeginTime" in status.reasons["pending"]
            assert status.evictions == 1 and "1 evicted so far" in status.summary()
            assert pool.failures == 0 and pool.failed is None and pool.submit_calls == 1
            # the queue lets it start again, from the next second on: slurmd refuses a job
            # whose credential was made in the second its previous run's was revoked (the
            # requeue; seconds resolution), and the run then fails at once ("Job credential
            # revoked", exit 1). Slurm's own begin time for a requeued job avoids that; "now"
            # sometimes did not (CI).
            subprocess.run(["scontrol", "update", f"JobId={victim}", "StartTime=now+1"],
                           check=True)
            cluster.wait_for_workers(2, timeout=120, progress=False)
            assert client.gather(futures) == [0, 1]
            runs = runs_per_key(client)
            assert sorted(runs.values()) == [1, 2]  # the evicted worker's task ran again
        assert pool.failures == 0 and pool.submit_calls == 1, job_logs(pool)
    assert f"job {victim} was requeued or preempted by slurm" in caplog.text
    assert "Not a failure" in caplog.text
    assert slurm_jobs(cluster.name) == []


@pytest.mark.htcondor
@pytest.mark.timeout(300)
def test_htcondor_reports_its_concurrency_limit_and_a_vacated_job_is_an_eviction(
        htcondor_pool, staging, caplog) -> None:
    caplog.set_level(logging.INFO, logger="hybrid")
    with dask.config.set(FAST_POLLS), HybridCluster() as cluster:
        pool = cluster.add_pool("cpu", "htcondor", nanny=False, job_extra_directives=[
            "concurrency_limits = hybrid_ci_busy"])
        cluster.scale(3)
        wait_for(lambda: len(cluster.connected_workers()) == 2, 150, "two workers")
        reason = "concurrency limit hybrid_ci_busy reached"
        wait_for(lambda: reason in cluster.pool_status()["cpu"].reasons.get("pending", {}),
                 90, "the idle job to carry the negotiator's reason")
        status = cluster.pool_status()["cpu"]
        assert (status.jobs["running"], status.jobs["pending"]) == (2, 1)
        assert f"1 pending ({reason}: 1)" in status.summary()
        victim = sorted(j for j, s in pool.jobs.items() if s.state.value == "running")[0]
        htcondor2.Schedd().act(htcondor2.JobAction.Vacate, [victim])  # condor_vacate_job
        wait_for(lambda: pool.evictions >= 1, 120, "the vacate to be seen as an eviction")
        assert pool.failures == 0 and pool.failed is None
        wait_for(lambda: len(cluster.connected_workers()) == 2, 150,
                 "two workers again (the limit lets two jobs run)")
        with cluster.get_client() as client:
            assert client.gather(client.map(square, range(10))) == [x * x for x in range(10)]
        assert pool.submit_calls == 1 and len(condor_jobs(cluster.name)) == 3
        assert pool.failures == 0
    assert f"job {victim} was vacated (evicted) by htcondor" in caplog.text
    assert condor_jobs(cluster.name) == []


@pytest.mark.slurm
@pytest.mark.timeout(420)
def test_on_a_full_partition_workers_drain_one_after_another_and_no_task_is_recomputed(
        slurm_cluster, staging, caplog) -> None:  # (before: KilledWorker, or tasks rerun)
    """Both slots of the busy partition held by the pool's two workers, which reach their
    lifetimes within seconds of each other: their replacements wait for those very slots.
    The second worker waits to drain until another worker can take its results (the first's
    replacement), instead of both leaving with their results (32 of 70 tasks ran again in
    an audit)."""
    caplog.set_level(logging.INFO, logger="hybrid")
    # (no stagger and a slow poll: both are due at the same look, as jobs that started
    # together are on a busy facility)
    with dask.config.set({"hybrid.batch.poll-interval": "4s"}), HybridCluster() as cluster:
        pool = cluster.add_pool("cpu", "slurm", cores=1, memory="256 MiB", walltime="00:01",
                                nanny=False, queue=BUSY, lifetime_stagger="0s")
        cluster.scale(2)
        cluster.wait_for_workers(2, timeout=120, progress=False)
        with cluster.get_client() as client:
            # (44 tasks of 2 s: the two workers are still busy when both are due, at 30 s,
            # and the results of both must survive to the sum at the end)
            futures = client.map(recorded_work, range(44), [2.0] * 44, pure=False)
            total = client.submit(sum, futures)  # needs every result at the end
            assert total.result(timeout=300) == sum(range(44))
            runs = runs_per_key(client)
        assert len(runs) == 44 and set(runs.values()) == {1}, {
            k: n for k, n in runs.items() if n > 1}  # nothing ran twice
        assert pool.failures == 0
    # (when both were due at the same look, the second waited to drain: said once; when
    # a poll fell between them, the first's results went to the second, as before)
    said = [r.getMessage() for r in caplog.records if "waits to drain" in r.getMessage()]
    assert len(said) <= 1, said
    assert slurm_jobs(cluster.name) == []


@pytest.mark.alongside  # (its own jobs, the default partition, no slot limit)
@pytest.mark.slurm
@pytest.mark.htcondor
@pytest.mark.timeout(480)
def test_a_graph_longer_than_three_walltimes_finishes_with_no_task_recomputed(
        htcondor_pool, slurm_cluster, staging, caplog) -> None:
    caplog.set_level(logging.INFO, logger="hybrid")
    with dask.config.set(FAST_POLLS), HybridCluster() as cluster:
        # a one-minute walltime: each worker drains at about 30 s (auto lifetime), its job
        # is replaced ahead of time, and it stops on its own at 45 s at the latest
        pools = [cluster.add_pool(name, name, cores=1, memory="256 MiB", walltime="00:01",
                                  nanny=False) for name in ("slurm", "htcondor")]
        assert [p.spec.lifetime_seconds() for p in pools] == [30, 30]
        for pool in pools:
            cluster.scale(1, pool=pool.name)
        cluster.wait_for_workers(2, timeout=150, progress=False)
        with cluster.get_client() as client:
            start = time.monotonic()
            # 480 worker-seconds: more than three walltimes even while replacements that
            # arrive ahead of time work beside the workers they replace
            futures = client.map(recorded_work, range(240), [2.0] * 240, pure=False)
            total = client.submit(sum, futures)  # needs every result at the end
            assert total.result(timeout=420) == sum(range(240))
            lasted = time.monotonic() - start
            runs = runs_per_key(client)
        assert lasted >= 180, lasted  # at least three walltimes
        assert len(runs) == 240 and set(runs.values()) == {1}  # nothing ran twice
        for pool in pools:
            left = [s for s in pool.ended if s.reason != "removed by hybrid"]
            assert len(left) >= 3, (pool.name, left)  # replaced again and again...
            assert {s.state.value for s in left} == {"finished"}, left  # ...never killed
            assert pool.failures == 0 and pool.evictions == 0
    assert "reach the end of their lifetime" in caplog.text
    assert "reached its walltime" not in caplog.text
    assert slurm_jobs(cluster.name) == [] and condor_jobs(cluster.name) == []


@pytest.mark.alongside  # (its own jobs, the default partition, no slot limit)
@pytest.mark.slurm
@pytest.mark.htcondor
@pytest.mark.timeout(300)
def test_demand_falls_back_from_a_waiting_slurm_pool_to_htcondor_and_back(
        htcondor_pool, slurm_cluster, staging, caplog) -> None:
    caplog.set_level(logging.INFO, logger="hybrid")
    with dask.config.set(FAST_POLLS), HybridCluster() as cluster:
        batch = cluster.add_pool("batch", "slurm", cores=1, memory="256 MiB", walltime="00:10",
                                 nanny=False, job_extra_directives=["--begin=now+30"])
        fast = cluster.add_pool("fast", "htcondor", cores=1, nanny=False)
        cluster.prefer(["batch", "fast"], fallback_after="5s")
        slow_adaptive = cluster.adapt(pool="batch", minimum=2, maximum=2, interval="1s",
                                      wait_count=2)
        fast_adaptive = cluster.adapt(pool="fast", minimum=0, maximum=2, interval="1s",
                                      wait_count=2)
        with cluster.get_client() as client:
            release = Event(f"release-{cluster.name}", client=client)
            futures = [client.submit(held_until, release.name, i, pure=False)
                       for i in range(2)]
            # the batch jobs wait (BeginTime); after 5 s the fast pool takes their demand
            wait_for(lambda: len(cluster.connected_workers("fast")) == 2, 150,
                     "the fast pool's two workers")
            assert batch.submit_calls == 1
            status = cluster.pool_status()
            assert "BeginTime" in status["batch"].reasons.get("pending", {})
            assert status["batch"].fallback == "fast"
            wait_for(lambda: len(started_held(client)) == 2, 60,
                     "both tasks on the fast workers")
            # the preferred pool's workers arrive: the fast pool's share drops to nothing
            wait_for(lambda: len(cluster.connected_workers("batch")) == 2, 120,
                     "the batch pool's two workers")
            assert cluster.sync(fast_adaptive.target) == 0
            assert cluster.sync(slow_adaptive.target) == 2
            release.set()
            assert sorted(client.gather(futures)) == [0, 1]
            # the fast pool shrinks back; the preferred pool keeps its workers
            wait_for(lambda: not fast.active(), 90, "the fast pool's jobs to go")
            assert len(cluster.connected_workers("batch")) == 2
            assert batch.submit_calls == 1 and fast.submit_calls == 1
        assert slow_adaptive.errors == [] and fast_adaptive.errors == []
    submitted = {r.getMessage().split(":")[0]: r.created for r in caplog.records
                 if "submitted" in r.getMessage()}
    # the fast pool waited for the batch pool's jobs to pend the fallback time first
    assert submitted["pool fast"] - submitted["pool batch"] >= 5
    assert slurm_jobs(cluster.name) == [] and condor_jobs(cluster.name) == []


@pytest.mark.htcondor
@pytest.mark.timeout(300)
def test_a_held_job_is_said_and_its_worker_no_longer_counted(
        htcondor_pool, staging, caplog) -> None:
    """A held job's worker is gone while its job stays in the queue: a warning says so once,
    with HTCondor's reason and what to do (an adaptive pool counts it toward its target, and
    nothing else would say why its work stalls); the pool's status (the notebook's "workers"
    column, ``pool_status().connected``) counts the workers connected now, not every job
    whose worker once connected."""
    caplog.set_level(logging.WARNING, logger="hybrid")
    with dask.config.set({"hybrid.batch.poll-interval": "0.5s"}), HybridCluster() as cluster:
        pool = cluster.add_pool("w", "htcondor", nanny=False)
        cluster.scale(2)
        cluster.wait_for_workers(2, timeout=180, progress=False)
        wait_for(lambda: cluster.pool_status()["w"].connected == 2, 30, "2 workers counted")
        victim = sorted(pool.active())[-1]
        htcondor2.Schedd().act(htcondor2.JobAction.Hold, [victim], reason="test: held")
        wait_for(lambda: len(cluster.connected_workers("w")) == 1, 120,
                 "the held job's worker to leave")
        wait_for(lambda: cluster.pool_status()["w"].jobs["held"] == 1, 60,
                 "the pool to see the hold")
        held = [r.getMessage() for r in caplog.records if "is held by htcondor" in r.getMessage()]
        # (the bindings' hold leaves HoldReason empty: the code says who held it)
        assert len(held) == 1 and victim in held[0] and "held by a user" in held[0], held
        assert "hybrid cancel --system htcondor " + victim in held[0]
        status = cluster.pool_status()["w"]
        wait_for(lambda: cluster.pool_status()["w"].connected == 1, 30,
                 f"the status to count 1 worker connected (it says {status.connected})")
