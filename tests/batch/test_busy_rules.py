"""The busy-facility rules on local pools (no batch system needed): lifetimes that drain and
replace workers without recomputing a task, adaptivity that never retires the only holder of
a result, orders of preference (with GPU/CPU routing) and their bad input, lifetime bad
input.

The same rules on the real HTCondor pool and Slurm are in tests/batch/test_busy_pools.py; at
10,000 jobs in the batch-queue simulator in tests/simulator.
"""

from __future__ import annotations

import logging
import os
import sys
from collections import Counter

import dask
import pytest
from distributed import Event

from hybrid import HybridCluster
from hybrid.errors import ConfigurationError
from hybrid.manager.preference import Capacity, shares
from hybrid.pools import PoolSpec
from tests.batch._tasks import held_until, recorded_work, runs_per_key, square, started_held
from tests.batch.test_real_pools import wait_for
from tests.scheduler_workers import scheduler_workers

pytestmark = pytest.mark.timeout(240)


def test_workers_drain_at_their_lifetime_and_are_replaced_without_a_recomputed_task(
        staging, caplog) -> None:
    caplog.set_level(logging.INFO, logger="hybrid")
    with dask.config.set({"hybrid.batch.poll-interval": "0.5s"}), HybridCluster() as cluster:
        pool = cluster.add_pool("cpu", "local", nanny=False, lifetime="6s",
                                lifetime_stagger=0)
        cluster.scale(2)
        cluster.wait_for_workers(2, timeout=60, progress=False)
        with cluster.get_client() as client:
            # about 12 s of work on two workers: each reaches its lifetime at least once
            futures = client.map(recorded_work, range(48), [0.5] * 48, pure=False)
            total = client.submit(sum, futures)  # every result is needed at the end
            assert total.result(timeout=180) == sum(range(48))
            runs = runs_per_key(client)
        assert len(runs) == 48 and set(runs.values()) == {1}, runs  # none ran twice
        drained = [s for s in pool.ended if s.reason != "removed by hybrid"]
        assert len(drained) >= 2  # jobs left at the end of their lifetime...
        assert {s.state.value for s in drained} == {"finished"}  # ...by retiring, no kill
        assert len(pool.ended) + len(pool.active()) > 2  # ...and were replaced
        assert pool.failures == 0 and pool.failed is None
    text = caplog.text
    assert "reach the end of their lifetime" in text and "their replacements go out" in text
    assert "take no new task, finish their running ones" in text


def test_replacements_go_out_ahead_by_the_time_a_worker_takes_to_arrive(staging) -> None:
    """The lead of a replacement is the queue wait AND the worker's start-up: a worker that
    takes seconds to start after its job started (a slow prologue, a loaded node) gets its
    replacement that much earlier. (Measured on the busy CI Slurm: with the queue wait alone,
    replacements arrived after their predecessors' deadline and results were lost.)"""
    with dask.config.set({"hybrid.batch.poll-interval": "0.5s"}), HybridCluster() as cluster:
        pool = cluster.add_pool("cpu", "local", nanny=False, lifetime="1 minute",
                                job_script_prologue=["sleep 4"], python=sys.executable)
        cluster.scale(2)
        cluster.wait_for_workers(2, timeout=60, progress=False)
        assert len(pool.arrival_waits) == 2 and min(pool.arrival_waits) >= 4
        # the queue made nobody wait; the workers took their prologue's 4 s and more
        assert max(pool.queue_waits, default=0) < 4
        assert 4 < cluster.manager.replacement_lead(pool) <= 30  # at most half the lifetime


def test_a_job_whose_worker_arrives_before_a_query_saw_it_start_gets_its_lifetime(
        staging) -> None:
    """A worker that connects before any query saw its job running (a fast start, a slow
    poll): the job runs from then on and its lifetime counts from then, so it is drained and
    replaced like any other (with no start noted it would run into its walltime)."""
    with dask.config.set({"hybrid.batch.poll-interval": "10 minutes"}), \
            HybridCluster() as cluster:
        pool = cluster.add_pool("cpu", "local", nanny=False, lifetime="1 minute")
        cluster.scale(1)
        cluster.wait_for_workers(1, timeout=60, progress=False)
        [job_id] = pool.jobs
        assert pool.jobs[job_id].state.value == "running"
        assert job_id in pool._started and pool.queue_waits  # its start is noted
        drain = cluster.manager.drain_at(pool, job_id)
        stagger = pool.spec.lifetime_stagger_seconds()
        assert drain is not None and 0 < drain - cluster.manager.clock() <= 60 + stagger
        assert pool.evictions == 0


def test_adaptivity_never_retires_the_only_worker_holding_results(staging) -> None:
    with HybridCluster() as cluster:
        pool = cluster.add_pool("cpu", "local", nanny=False)
        adaptive = cluster.adapt(pool="cpu", minimum=0, maximum=2, interval="0.3s",
                                 wait_count=2)
        with cluster.get_client() as client:
            futures = client.map(square, range(40), pure=False)
            assert client.gather(futures) == [x * x for x in range(40)]
            # no demand now, but the results live on the workers: one may go (its results
            # move to the other), the last one stays while the client holds them
            steps = adaptive.steps
            wait_for(lambda: adaptive.steps >= steps + 8, 60, "eight more adaptive steps")
            assert len(cluster.connected_workers()) == 1
            assert client.gather(futures) == [x * x for x in range(40)]
            del futures
            wait_for(lambda: not pool.active(), 60, "the last job to go once the results are "
                                                   "released")
        assert adaptive.errors == []


def test_orders_of_preference_and_their_bad_input_submit_nothing(staging) -> None:
    with HybridCluster() as cluster:
        for name in ("a", "b", "c"):
            cluster.add_pool(name, "local", nanny=False)
        cluster.add_pool("g", "local", gpus=1, nanny=False)
        bad = [
            (("a",), {}, "prefer.order", "two or more"),
            ((["a"],), {}, "prefer.order", "two or more"),
            ((["a", "zz"],), {}, "prefer.order", "a pool of this cluster"),
            ((["a", "b", "a"],), {}, "prefer.order", "comes back"),
            ((["a", "g"],), {}, "prefer.order", "serve the same tasks"),
            ((["a", "b"],), {"fallback_after": -1}, "prefer.fallback_after", "duration"),
            ((["a", "b"],), {"fallback_after": "soon"}, "prefer.fallback_after", "duration"),
            ((["a", "b"],), {"fallback_after": "3 weeks"}, "prefer.fallback_after",
             "at most 7 days"),
        ]
        for args, kwargs, field, words in bad:
            with pytest.raises(ConfigurationError, match=words) as caught:
                cluster.prefer(*args, **kwargs)
            assert caught.value.field == field, (args, kwargs, caught.value)
            assert str(caught.value).count("(0:") <= 1, caught.value  # one aside, not two
        cluster.prefer(["a", "b"], fallback_after="10 minutes")
        with pytest.raises(ConfigurationError, match=r"cycle: .*b -> a -> b|a -> b -> a"):
            cluster.prefer(["b", "a"])
        with pytest.raises(ConfigurationError, match="take the demand of a and c"):
            cluster.prefer(["c", "b"])
        status = cluster.pool_status()  # the good order stands, unchanged by the refusals
        assert (status["a"].fallback, status["a"].fallback_after) == ("b", 600)
        assert status["b"].fallback is None
        assert "falls back to b after 10 min pending" in status["a"].summary()
        cluster.prefer(["b", "c"])  # extends the order: a -> b -> c
        assert cluster.manager.preferences.order_of("c") == ["a", "b", "c"]
        cluster.prefer(None)
        assert cluster.pool_status()["a"].fallback is None
        assert all(p.submit_calls == 0 and not p.used for p in cluster.pools.values())
    assert not any(staging.glob("*"))


def test_an_order_of_gpu_pools_spills_at_its_cap_and_cpu_tasks_keep_their_pool(
        staging) -> None:
    """Preference with annotated routing: the GPU tasks' demand goes to the preferred GPU
    pool up to its maximum and the rest to the next GPU pool; the CPU tasks grow the CPU pool
    only, and no task runs on a pool of the other resource."""
    with dask.config.set({"hybrid.batch.poll-interval": "0.5s"}), HybridCluster() as cluster:
        pools = {name: cluster.add_pool(name, "local", nanny=False, **options)
                 for name, options in (("gpu-a", {"gpus": 1}), ("gpu-b", {"gpus": 1}),
                                       ("cpu", {}))}
        cluster.prefer(["gpu-a", "gpu-b"], fallback_after="10 minutes")
        adaptives = {name: cluster.adapt(pool=name, minimum=0, maximum=maximum,
                                         interval="0.3s", wait_count=2)
                     for name, maximum in (("gpu-a", 1), ("gpu-b", 4), ("cpu", 4))}
        with cluster.get_client() as client:
            release = Event(f"release-{cluster.name}", client=client)
            gpu = [client.submit(held_until, release.name, i, gpu_task=True, pure=False)
                   for i in range(3)]
            cpu = [client.submit(held_until, release.name, 10 + i, pure=False)
                   for i in range(2)]
            wait_for(lambda: len(started_held(client)) == 5, 120, "all five tasks to start")
            # gpu-a is capped at one job: the other two GPU tasks spill over to gpu-b
            assert {name: len(pool.active()) for name, pool in pools.items()} == {
                "gpu-a": 1, "gpu-b": 2, "cpu": 2}
            assert cluster.pool_status()["gpu-a"].fallback == "gpu-b"
            names = {addr: info["name"] for addr, info
                     in scheduler_workers(client).items()}
            on = {}
            for addr, keys in client.processing().items():
                for key in keys:
                    on[key] = names[addr]
            gpu_workers = (set(cluster.connected_workers("gpu-a"))
                           | set(cluster.connected_workers("gpu-b")))
            assert {on[f.key] for f in gpu} <= gpu_workers
            assert {on[f.key] for f in cpu} <= set(cluster.connected_workers("cpu"))
            # more steps submit nothing more: every pool's jobs meet its share
            steps = adaptives["gpu-b"].steps
            wait_for(lambda: adaptives["gpu-b"].steps >= steps + 5, 60, "five more steps")
            assert [p.submit_calls for p in pools.values()] == [1, 1, 1]
            release.set()
            assert sorted(client.gather(gpu + cpu)) == [0, 1, 2, 10, 11]
            del gpu, cpu
            wait_for(lambda: not any(p.active() for p in pools.values()), 90,
                     "every pool to shrink back to nothing")
        assert all(a.errors == [] for a in adaptives.values())


def test_shares_split_the_demand_along_an_order() -> None:
    def cap(name, maximum, plan=0, stale=0, per_job=1, adaptive=True):
        return Capacity(name, per_job, maximum, plan, stale, adaptive)

    # nothing submitted yet: the preferred pool takes what its maximum allows, at once
    assert shares(10, [cap("slow", 8), cap("fast", 4)]) == {"slow": 8, "fast": 2}
    # its 8 jobs pend past the fallback time: the next pool takes their part, they stay
    assert shares(10, [cap("slow", 8, plan=8, stale=8), cap("fast", 4)]) == {
        "slow": 8, "fast": 4}
    # its workers arrived: the next pool shrinks back
    assert shares(10, [cap("slow", 8, plan=8), cap("fast", 4, plan=4)]) == {
        "slow": 8, "fast": 2}
    assert shares(6, [cap("slow", 8, plan=8), cap("fast", 4, plan=4)]) == {
        "slow": 6, "fast": 0}
    # jobs of several threads; a fixed pool keeps its target and covers what it can
    assert shares(10, [cap("big", 2, per_job=4), cap("small", 8)]) == {"big": 2, "small": 2}
    assert shares(3, [cap("fixed", 0, plan=2, adaptive=False), cap("k8s", 4)]) == {
        "fixed": 2, "k8s": 1}
    assert shares(0, [cap("slow", 8, plan=3), cap("fast", 4)]) == {"slow": 0, "fast": 0}


@pytest.mark.parametrize("options, field, words", [
    ({"walltime": "01:00", "lifetime": "2h"}, "lifetime", "leaves at least 10 s"),
    ({"walltime": "01:00", "lifetime": "59 minutes", "lifetime_stagger": "1 minute"},
     "lifetime", "leaves at least 10 s"),
    ({"walltime": "01:00", "lifetime_stagger": "40 minutes"}, "lifetime_stagger",
     "leaves at least 10 s"),
    ({"lifetime": "1h", "lifetime_stagger": "2h"}, "lifetime_stagger",
     "less than the lifetime"),
    ({"lifetime": "soon"}, "lifetime", "duration"),
    ({"lifetime": "1h", "lifetime_stagger": -5}, "lifetime_stagger", "duration"),
    ({"walltime": "01:00", "lifetime_restart": True, "nanny": True}, "lifetime_restart",
     "no walltime"),
    ({"lifetime": "1h", "lifetime_restart": True, "nanny": False}, "lifetime_restart",
     "a nanny"),
    ({"lifetime_restart": True, "nanny": True}, "lifetime_restart", "a lifetime"),
    ({"lifetime": "1h", "worker_extra_args": ["--lifetime", "2h"]}, "lifetime",
     "no lifetime when worker_extra_args give --lifetime"),
])
def test_lifetime_bad_input_names_the_field_and_submits_nothing(options, field, words,
                                                                staging) -> None:
    with pytest.raises(ConfigurationError, match=words) as caught:
        PoolSpec.build("cpu", "slurm", **options)
    assert caught.value.field == f"add_pool('cpu').{field}"
    with HybridCluster() as cluster:
        with pytest.raises(ConfigurationError, match=words):
            cluster.add_pool("cpu", "slurm", **options)
        assert cluster.pools == {}
    assert not any(staging.glob("*"))


def test_a_walltime_gives_workers_a_lifetime_and_a_deadline_before_it() -> None:
    spec = PoolSpec.build("cpu", "slurm", walltime="01:00")
    # auto: a tenth of the walltime (6 min) before it, spread by a quarter of that margin
    assert spec.lifetime_seconds() == 3240 and spec.lifetime_stagger_seconds() == 90
    assert spec.worker_deadline_seconds() == 3540  # distributed's own --lifetime: the net
    assert spec.to_dict()["lifetime"] == "auto"
    assert PoolSpec.from_dict(spec.to_dict()) == spec
    with HybridCluster(scheduler_address=None) as cluster:
        script = cluster.add_pool("cpu", "slurm", walltime="01:00").job_script()
    assert "--lifetime 3540s --lifetime-stagger 0s" in script
    assert PoolSpec.build("cpu", "slurm").lifetime_seconds() is None  # no walltime
    off = PoolSpec.build("cpu", "slurm", walltime="01:00", lifetime="off")
    assert off.lifetime_seconds() is None and off.worker_deadline_seconds() is None
    own = PoolSpec.build("cpu", "slurm", walltime="01:00", worker_extra_args=["--lifetime",
                                                                             "50m"])
    assert own.lifetime_seconds() is None  # distributed's own lifetime, as the user asked
    assert PoolSpec.build("cpu", "slurm", walltime="00:01").lifetime_seconds() == 30


def test_a_pools_active_jobs_follow_every_change_of_its_job_table() -> None:
    """The active jobs, the counted ones and the jobs by state and reason are kept as the
    job table (and the retiring jobs) change: every way of changing them is seen (a missed
    one would hide a job from the adaptive plan)."""
    from hybrid.batch import JobState, JobStatus, WorkerJob, get_system
    from hybrid.manager.pool import ManagedPool
    from hybrid.worker import Connection

    spec = PoolSpec.build("cpu", "local", cores=1, nanny=False)
    pool = ManagedPool(spec, get_system("local"),
                       WorkerJob("c1", spec, Connection("tcp://127.0.0.1:1")))

    def status(job_id: str, state: JobState) -> JobStatus:
        return JobStatus(job_id, state, None, "c1", "cpu")

    def expected() -> list[str]:
        return [j for j, s in pool.jobs.items()
                if s.state in (JobState.pending, JobState.running, JobState.held)]

    def check_tallies() -> None:  # what the table keeps as it changes
        assert pool.jobs.by_state_reason == Counter(  # type: ignore[attr-defined]
            (s.state, s.reason) for s in pool.jobs.values())
        assert sorted(pool.counted()) == sorted(  # (in no promised order)
            j for j in expected() if j not in pool.retiring)

    changes = [
        lambda: pool.track([status("1", JobState.pending), status("2", JobState.pending)]),
        lambda: pool.jobs.__setitem__("1", status("1", JobState.running)),
        lambda: pool.retiring.__setitem__("1", 10.0),
        lambda: pool.jobs.__setitem__("2", status("2", JobState.removing)),
        lambda: pool.jobs.__setitem__("2", status("2", JobState.pending)),
        lambda: pool.retiring.pop("1"),
        lambda: pool.jobs.__delitem__("2"),
        lambda: pool.jobs.setdefault("3", status("3", JobState.held)),
        lambda: pool.jobs.update({"4": status("4", JobState.pending)}),
        lambda: pool.jobs.__ior__({"5": status("5", JobState.running)}),
        lambda: pool.track([status("6", JobState.removing), status("7", JobState.held),
                            status("9", JobState.pending)]),  # (new jobs: counted together)
        lambda: pool.jobs.update({"7": status("7", JobState.running),  # (together)
                                  "9": status("9", JobState.removing)}),
        lambda: pool.jobs.update({"6": status("6", JobState.running),  # (one known, one new)
                                  "8": status("8", JobState.pending)}),
        lambda: pool.jobs.pop("1"),
        lambda: pool.retiring.update({"4": 10.0}),
        lambda: pool.jobs.popitem(),
        lambda: pool.forget("4"),
        lambda: pool.jobs.clear(),
    ]
    seen = set()
    for change in changes:
        change()
        found = pool.active()
        assert sorted(found) == sorted(expected())  # (in no promised order)
        check_tallies()
        found.append("not a job")  # the caller's copy: the pool's own list stays
        assert sorted(pool.active()) == sorted(expected())
        seen.add(tuple(sorted(pool.active())))
    assert len(seen) > 4  # the changes did change the active list


def test_arrival_waits_are_noted_in_the_order_the_workers_were_found() -> None:
    """The replacement lead reads a pool's last 50 arrival waits, so which ones are kept
    must not depend on Python's string hashing: the facility-day simulation gave two
    different days under different ``PYTHONHASHSEED`` values while they were noted in the
    order of a set."""
    import asyncio

    from hybrid.batch import JobState, JobStatus, get_system
    from hybrid.manager import PoolManager
    from hybrid.worker import Connection

    manager = PoolManager("c1", Connection("tcp://127.0.0.1:1"), None)
    pool = manager.add(PoolSpec.build("cpu", "local", cores=1, nanny=False),
                       get_system("local"))
    found = [f"job.{n}" for n in (7, 3, 11, 1, 25, 9, 14, 2, 30, 5, 18, 4, 21, 8, 16)]
    for n, job_id in enumerate(found):
        pool.track([JobStatus(job_id, JobState.pending, None, "c1", "cpu")])
        pool._submitted[job_id] = -float(n)  # each a different wait
    manager.clock = lambda: 0.0
    asyncio.run(manager._note_connected(pool, dict.fromkeys(found)))
    assert list(pool.arrival_waits) == [float(n) for n in range(len(found))]


def test_jobs_queued_longer_than_the_stuck_timeout_are_reported_whenever_they_first_waited(
        caplog) -> None:
    """The stuck report reads the jobs in the order they were first seen pending (and stops
    at the first that has not waited long enough): a job that waits again after an eviction
    is noted anew, at the end, and is reported once it has waited again for long enough."""
    import dask

    from hybrid.batch import JobState, JobStatus, get_system
    from hybrid.manager import PoolManager
    from hybrid.worker import Connection

    manager = PoolManager("c1", Connection("tcp://127.0.0.1:1"), None)
    pool = manager.add(PoolSpec.build("cpu", "local", cores=1, nanny=False),
                       get_system("local"))

    def seen(job_id: str, state: JobState, now: float) -> None:
        old = pool.jobs[job_id]
        new = JobStatus(job_id, state, f"waits since {now:g}", "c1", "cpu")
        manager._observe(pool, old, new, now)
        pool.jobs[job_id] = new

    pool.track([JobStatus(f"job.{n}", JobState.pending, None, "c1", "cpu") for n in range(4)])
    for n, at in enumerate((0.0, 10.0, 20.0)):
        seen(f"job.{n}", JobState.pending, at)
    seen("job.3", JobState.running, 5.0)
    seen("job.3", JobState.pending, 25.0)  # evicted: it waits again, noted last
    with dask.config.set({"hybrid.batch.stuck-timeout": "15s"}), caplog.at_level("WARNING"):
        manager._report_pending(pool, 30.0)
        assert sorted(pool.stuck) == ["job.0", "job.1"]
        manager._report_pending(pool, 39.0)
        assert sorted(pool.stuck) == ["job.0", "job.1", "job.2"]
        manager._report_pending(pool, 41.0)
        assert sorted(pool.stuck) == ["job.0", "job.1", "job.2", "job.3"]
    reports = [r.getMessage() for r in caplog.records if "queued for more than" in r.getMessage()]
    assert len(reports) == 3 and "2 job(s)" in reports[0], reports


def test_a_job_that_waits_again_after_an_eviction_is_reported_stuck_again(caplog) -> None:
    """A job reported as queued too long, which then ran and was evicted, and waits again
    for longer than the stuck timeout, is reported again (it was said only the first time)."""
    import dask

    from hybrid.batch import JobState, JobStatus, get_system
    from hybrid.manager import PoolManager
    from hybrid.worker import Connection

    manager = PoolManager("c1", Connection("tcp://127.0.0.1:1"), None)
    pool = manager.add(PoolSpec.build("cpu", "local", cores=1, nanny=False),
                       get_system("local"))
    pool.track([JobStatus("job.0", JobState.pending, None, "c1", "cpu")])

    def seen(state: JobState, reason: str | None, now: float) -> None:
        new = JobStatus("job.0", state, reason, "c1", "cpu")
        manager._observe(pool, pool.jobs["job.0"], new, now)
        pool.jobs["job.0"] = new

    with dask.config.set({"hybrid.batch.stuck-timeout": "15s"}), caplog.at_level("WARNING"):
        seen(JobState.pending, "Resources", 0.0)
        manager._report_pending(pool, 20.0)
        seen(JobState.running, None, 25.0)
        seen(JobState.pending, "Priority", 30.0)  # evicted: it waits again
        manager._report_pending(pool, 40.0)  # (10 s: not yet)
        manager._report_pending(pool, 50.0)
    reports = [r.getMessage() for r in caplog.records if "queued for more than" in r.getMessage()]
    assert len(reports) == 2 and "Priority" in reports[1], reports


def test_a_pools_workers_follow_the_scheduler_as_workers_come_go_and_reuse_addresses() -> None:
    """``workers_by_job`` (which keeps the names it resolved) answers, after every change of
    the scheduler's workers, what a fresh look would: workers that join or leave, a new
    worker on an old address, another pool's workers, a worker whose job is tracked only
    later (adopted), a name that is not a string."""
    import random

    from hybrid.batch import JobState, JobStatus, WorkerJob, get_system
    from hybrid.batch.jobs import worker_name_suffix
    from hybrid.manager.pool import ManagedPool
    from hybrid.worker import Connection

    spec = PoolSpec.build("cpu", "local", cores=1, nanny=False)
    pool = ManagedPool(spec, get_system("local"),
                       WorkerJob("c1", spec, Connection("tcp://127.0.0.1:1")))
    jobs = [f"job.{n}" for n in range(12)]
    pool.track([JobStatus(j, JobState.running, None, "c1", "cpu") for j in jobs[:8]])

    def fresh_look(live: dict[str, dict]) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for address, info in live.items():
            name = info["name"]
            job_id = pool.job_id_of_worker(name) if isinstance(name, str) else None
            if job_id is not None:
                out.setdefault(job_id, []).append(address)
        return out

    rng = random.Random(7)
    live: dict[str, dict] = {}
    names = ["another-pool-1", "another-pool-2", 17] + [
        pool._name_prefix + worker_name_suffix(j) for j in jobs]
    changed, previous = 0, {}
    for step in range(300):
        for _ in range(rng.randint(0, 4)):
            address = f"tcp://127.0.0.1:{rng.randint(1000, 1030)}"
            if address in live and rng.random() < 0.5:
                del live[address]  # a worker left
            else:  # a worker joined: maybe on an address another one had
                live[address] = {"name": rng.choice(names)}
        if step == 150:  # the last jobs are tracked only now (adopted)
            pool.track([JobStatus(j, JobState.running, None, "c1", "cpu") for j in jobs[8:]])
        found = pool.workers_by_job(live)
        expected = fresh_look(live)
        assert {j: sorted(a) for j, a in found.items()} == {
            j: sorted(a) for j, a in expected.items()}, step
        changed += found != previous  # (the answer did change: the test sees something)
        previous = {j: list(a) for j, a in found.items()}
        assert all(type(addresses) is tuple for addresses in found.values())  # unchangeable
        found.clear()  # the caller's own dict: does not reach the pool
        assert {j: sorted(a) for j, a in pool.workers_by_job(live).items()} == {
            j: sorted(a) for j, a in expected.items()}
    assert changed > 100
    assert any(j in previous for j in jobs[8:])  # the late-tracked jobs were found


def test_the_steps_passes_in_c_answer_what_plain_loops_would() -> None:
    """The adaptive step's passes over a large pool's jobs and workers run in C (issue 17,
    B4); on random tables each answers what the plain Python loop it replaced answers: the
    jobs to remove first, the stale jobs of an order, the workers of each job (several per
    job too), whether the scheduler's workers changed since the step looked, a
    submission's statuses."""
    import random

    from hybrid.adaptive import same_workers
    from hybrid.batch import JobState, JobStatus, WorkerJob, get_system
    from hybrid.batch.jobs import worker_name_suffix
    from hybrid.manager.pool import ManagedPool
    from hybrid.manager.preference import capacity
    from hybrid.worker import Connection

    spec = PoolSpec.build("cpu", "local", cores=1, nanny=False)
    pool = ManagedPool(spec, get_system("local"),
                       WorkerJob("c1", spec, Connection("tcp://127.0.0.1:1")))
    rng = random.Random(17)
    states = [JobState.pending, JobState.running, JobState.held, JobState.removing]
    ids = [f"job.{n}" for n in range(300)]
    pool.track(JobStatus("", JobState.pending, None, "c1", "cpu").for_jobs(ids[:150]))
    assert [pool.jobs[j] for j in ids[:150]] == [
        JobStatus(j, JobState.pending, None, "c1", "cpu") for j in ids[:150]]
    for job_id in ids[150:]:
        pool.jobs[job_id] = JobStatus(job_id, rng.choice(states), rng.choice([None, "R"]))
    for job_id in rng.sample(ids, 200):
        pool._submitted[job_id] = float(rng.randint(0, 50))  # ties too
    for job_id in rng.sample(ids, 120):
        pool._first_pending[job_id] = float(rng.randint(0, 60))
    asked = [*rng.sample(ids, 100), "not.tracked"]

    def removal_key(job_id: str) -> tuple[int, float, str]:
        status = pool.jobs.get(job_id)
        state = JobState.pending if status is None else status.state
        return ((0 if state is JobState.held else 1 if state is JobState.pending else 2),
                -pool._submitted.get(job_id, 0.0), job_id)

    assert pool.least_needed(asked) == sorted(asked, key=removal_key)
    assert pool.least_needed(asked, 7) == sorted(asked, key=removal_key)[:7]
    assert pool.least_needed(asked, 0) == []
    assert pool.least_needed(asked, 500) == sorted(asked, key=removal_key)

    stale = pool.state_counts.get(JobState.held, 0) + sum(
        70.0 - pool._submitted.get(j, first) >= 30.0
        for j, first in pool._first_pending.items()
        if j in pool.jobs and pool.jobs[j].state is JobState.pending)
    assert capacity(pool, 1.0, 70.0, ("k8s", 30.0)).stale == stale > 0

    names = [pool._name_prefix + worker_name_suffix(j) for j in ids[:40]]
    names += [f"{pool._name_prefix}{worker_name_suffix(ids[0])}-{k}" for k in range(3)]
    live = {f"tcp://127.0.0.1:{2000 + n}": {"name": rng.choice([*names, "other", 5])}
            for n in range(120)}
    expected: dict[str, list[str]] = {}
    for address, info in live.items():
        name = info["name"]
        job_id = pool.job_id_of_worker(name) if isinstance(name, str) else None
        if job_id:
            expected.setdefault(job_id, []).append(address)
    assert pool.workers_by_job(live) == {j: tuple(a) for j, a in expected.items()}
    assert any(len(addresses) > 1 for addresses in expected.values())

    assert same_workers(dict(live), live)
    moved = dict(live)
    first_address = next(iter(moved))
    moved[first_address] = {"name": "a new worker on an old address"}
    assert not same_workers(moved, live)
    assert not same_workers(dict(list(live.items())[1:]), live)
    assert not same_workers(dict(reversed(live.items())), live)  # (order: looked again)
    # with the names the step kept for its answer: the same verdicts
    from hybrid.manager.pool import worker_names

    assert same_workers(dict(live), live, worker_names(live))
    assert not same_workers(moved, live, worker_names(live))
    assert not same_workers(dict(list(live.items())[1:]), live, worker_names(live))
    assert pool.workers_by_job(live, worker_names(live)) == pool.workers_by_job(live)


def test_waiting_jobs_that_get_their_first_start_count_are_noted_together() -> None:
    """A queue that answers a start count (0) for jobs it first listed without one, with a
    new reason, for hundreds of waiting jobs at once (the simulated facility day's slowest
    refreshes: 470 jobs each, 6-7 ms looked at one by one): noted together, nothing left
    for a look each, with what a look would note (the start count, the first wait kept)."""
    from hybrid.batch import JobState, JobStatus, get_system
    from hybrid.manager import PoolManager
    from hybrid.worker import Connection

    manager = PoolManager("c1", Connection("tcp://127.0.0.1:1"), None)
    pool = manager.add(PoolSpec.build("cpu", "local", cores=1, nanny=False),
                       get_system("local"))
    ids = [f"job.{n}" for n in range(500)]
    pool.track(JobStatus(j, JobState.pending, None, "c1", "cpu") for j in ids)
    pool._first_pending.update(dict.fromkeys(ids, 2.0))
    after = {j: JobStatus(j, JobState.pending, "Priority", "c1", "cpu", None, 0) for j in ids}
    assert manager._note_together(pool, ids, after, 500.0) == []
    assert pool._starts == dict.fromkeys(ids, 0)
    assert pool._first_pending == dict.fromkeys(ids, 2.0)
    assert dict(pool.jobs) == after
    assert pool.jobs.by_state_reason == {(JobState.pending, "Priority"): 500}
    # a start count that grew: it ran between two looks; that job gets its look
    grown = {**after, ids[0]: JobStatus(ids[0], JobState.pending, "Priority", "c1", "cpu",
                                        None, 1)}
    assert manager._note_together(pool, ids[:1], grown, 510.0) == ids[:1]


def test_a_refresh_notes_together_what_it_would_note_job_by_job() -> None:
    """Jobs that wait with a new reason and jobs that start for the first time are noted
    together (issue 17, B4): on random changes the pool ends as the one-by-one
    ``_observe`` of every change leaves it (the jobs, their starts, when they started
    and first waited, the queue waits in order); the other changes are left for a look
    each."""
    import random

    from hybrid.batch import JobState, JobStatus, get_system
    from hybrid.manager import PoolManager
    from hybrid.worker import Connection

    rng = random.Random(3)
    states = [JobState.pending, JobState.running, JobState.held]
    ids = [f"job.{n}" for n in range(400)]
    before = {j: JobStatus(j, rng.choice(states), rng.choice([None, "A"]), "c1", "cpu",
                           None, rng.choice([None, 0, 1])) for j in ids}
    after = {j: JobStatus(j, rng.choice(states), rng.choice([None, "A", "B"]), "c1", "cpu",
                          None, rng.choice([None, 0, 1]), rng.random() < 0.05) for j in ids}
    started = set(rng.sample(ids, 60))

    def prepared() -> tuple[PoolManager, object]:
        manager = PoolManager("c1", Connection("tcp://127.0.0.1:1"), None)
        pool = manager.add(PoolSpec.build("cpu", "local", cores=1, nanny=False),
                           get_system("local"))
        pool.track(before.values())
        for n, job_id in enumerate(ids):
            pool._submitted[job_id] = float(n)
            if before[job_id].starts is not None:
                pool._starts[job_id] = before[job_id].starts
            if job_id in started:
                pool._started[job_id] = 1.0
            elif before[job_id].state is JobState.pending:
                pool._first_pending[job_id] = 2.0
        return manager, pool

    def look(manager: PoolManager, pool, job_ids: list[str]) -> None:
        for job_id in job_ids:  # what the refresh's loop does for a changed queued job
            old, new = pool.jobs[job_id], after[job_id]
            if new != old:
                manager._observe(pool, old, new, 500.0)
                pool.jobs[job_id] = new

    one_by_one, plain = prepared()
    look(one_by_one, plain, ids)
    together_manager, together = prepared()
    rest = together_manager._note_together(together, ids, after, 500.0)
    assert len(rest) > 0 and len(ids) - len(rest) > 30  # some together, some looked at
    look(together_manager, together, rest)
    for name in ("_started", "_first_pending", "_starts", "_submitted"):
        assert getattr(together, name) == getattr(plain, name), name
    assert dict(together.jobs) == dict(plain.jobs)
    assert together.jobs.by_state_reason == plain.jobs.by_state_reason
    assert list(together.queue_waits) == list(plain.queue_waits)
    assert together.evictions == plain.evictions


def test_a_local_job_that_ends_at_once_keeps_its_exit_code(staging, monkeypatch) -> None:
    """A job whose script ended before ``submit`` recorded its start time was reaped by that
    lookup, so its ``Popen`` read exit code 0: a prologue's ``exit 3`` was "finished". Here
    every job has ended (a zombie, not reaped) before ``submit`` goes on."""
    import subprocess

    from hybrid.batch import JobState, WorkerJob, get_system
    from hybrid.batch import local as local_module
    from hybrid.worker import Connection

    class EndedAtOnce(subprocess.Popen):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            os.waitid(os.P_PID, self.pid, os.WEXITED | os.WNOWAIT)  # ended, still a zombie

    monkeypatch.setattr(local_module.subprocess, "Popen", EndedAtOnce)
    spec = PoolSpec.build("cpu", "local", cores=1, nanny=False, job_script_prologue=["exit 3"])
    system = get_system("local")
    job = WorkerJob("exitcode", spec, Connection("tcp://127.0.0.1:9"))
    directory = staging / "exitcode"
    directory.mkdir(parents=True)
    (job_id,) = system.submit(job, directory, 1)
    (status,) = system.query(job_ids=[job_id])
    assert (status.state, status.reason) == (JobState.failed, "exit code 3")


def test_a_local_job_removed_while_its_worker_works_leaves_no_scratch(staging, tmp_path,
                                                                       monkeypatch) -> None:
    """A removal kills a job's worker at once (its job script's trap), so a busy worker never
    removed its ``dask-scratch-space/worker-*`` directory: each local job now has a
    temporary directory of its own (as a batch system's scratch), removed with the job."""
    import time

    temporary = tmp_path / "tmp"
    temporary.mkdir()
    monkeypatch.setenv("TMPDIR", str(temporary))
    with HybridCluster() as cluster:
        cluster.add_pool("cpu", "local", nanny=False)
        cluster.scale(2)
        cluster.wait_for_workers(2, timeout=60, progress=False)
        with cluster.get_client() as client:
            busy = client.map(time.sleep, [600, 601])
            wait_for(lambda: sum(map(len, client.processing().values())) == 2, 60,
                     "both workers busy")
            assert list(temporary.rglob("worker-*")), "the workers' scratch is elsewhere"
            del busy
    assert not list(temporary.iterdir()), list(temporary.rglob("*"))
