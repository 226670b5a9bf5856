"""The busy-facility scenarios of the batch-queue SIMULATOR (benchmarks/queue_simulator.py),
small, in the quick tier: hybrid's own pool manager and adaptivity, driven in simulated time
on simulated queues, keep their promises at sizes the CI pools cannot hold.

The simulator is a test double of a whole facility (queues, workers, a scheduler), named
as such; the same rules are tested on the real pools in tests/batch/test_busy_pools.py. The
numbers at full size are the benchmark's (``python -m benchmarks --only busy-sim``); no
wall time is judged here.
"""

from __future__ import annotations

import pytest

from benchmarks import busy_scenarios as scenarios

pytestmark = pytest.mark.timeout(240)


def test_a_busy_queue_gets_the_whole_demand_in_one_submission_and_never_more() -> None:
    ours = scenarios.over_submission("hybrid", scale=0.25)
    assert ours["first_submission"] == ours["maximum"]  # no job per queue wait
    assert ours["submit_calls"] == 1 and ours["ratio"] <= 1.1
    assert ours["most_queued"] <= ours["maximum"]  # pending jobs counted as workers
    assert ours["makespan_s"] is not None and ours["recomputed"] == 0
    model = scenarios.over_submission("dask-jobqueue model", scale=0.25)
    assert model["submit_calls"] == model["jobs"]  # the model submits one job at a time
    assert model["makespan_s"] is not None


def test_walltimes_end_but_no_task_is_recomputed() -> None:
    ours = scenarios.walltime("hybrid", scale=0.25)
    assert ours["makespan_s"] is not None
    assert ours["walltime_kills"] == 0 and ours["recomputed"] == 0, ours["recompute_causes"]
    assert ours["jobs"] > 8  # replaced again and again over eight walltimes
    # without a lifetime the walltime kills the same pool's workers, and work is lost
    bare = scenarios.walltime("hybrid, no lifetime", scale=0.25)
    assert bare["walltime_kills"] > 0 and bare["recomputed"] > 0


@pytest.mark.parametrize("requeue", [True, False], ids=["requeued", "preempted"])
def test_every_eviction_is_seen_as_one_and_none_is_a_failure(requeue) -> None:
    found = scenarios.evictions(requeue=requeue, scale=0.25)
    assert found["evictions"] > 10 and found["seen"] == found["evictions"]
    assert found["failures"] == 0 and found["gave_up"] is None
    assert found["makespan_s"] is not None  # the pool refilled and the work finished


def test_a_fast_capped_pool_takes_the_demand_a_waiting_pool_does_not_meet() -> None:
    alone = scenarios.fallback(with_fallback=False, scale=0.25)
    both = scenarios.fallback(with_fallback=True, scale=0.25)
    assert both["makespan_s"] < 0.8 * alone["makespan_s"]
    assert both["slow_jobs"] == alone["slow_jobs"]  # the preferred pool keeps its jobs
    assert both["fast_peak"] > 0
    # once the preferred pool's workers arrived the fast pool shrank back to nothing,
    # with work still left for the preferred pool's workers
    assert both["fast_gone_with_work_left_s"] is not None


def test_a_facility_day_keeps_every_promise_and_repeats_exactly() -> None:
    first = scenarios.facility(scale=0.05)
    assert first["failures"] == 0 and first["gave_up"] == []
    assert first["seen"] == first["evictions"] > 0
    for pool, most in first["most_counted"].items():
        # never more than maximum jobs count toward a pool; beyond them only the jobs at
        # the end of their lifetime, while their replacements come
        assert most <= first["maximum"][pool], (pool, first)
    assert first["finished_bursts"] >= first["bursts"] - 2  # the last may still run
    # hybrid's own share of each decision leaves out the doubles' answers (every decision
    # asks the simulated batch system or scheduler something)
    own, whole = first["decisions_own_cpu"], first["decisions_cpu"]
    assert own["count"] == whole["count"] > 0
    assert own["median_ms"] < whole["median_ms"]
    assert own["p99_ms"] <= whole["p99_ms"] and own["max_ms"] <= whole["max_ms"]
    again = scenarios.facility(scale=0.05)
    timing = ("decisions", "decisions_cpu", "decisions_own_cpu", "model_decisions",
              "model_decisions_cpu", "collections_in_decisions", "own_cpu_by_kind", "wall_s")
    assert {k: v for k, v in first.items() if k not in timing} == {
        k: v for k, v in again.items() if k not in timing}
    # the same decisions in the same order: each counted at the least it took (B4)
    assert ({k: len(v) for k, v in first["own_cpu_by_kind"].items()}
            == {k: len(v) for k, v in again["own_cpu_by_kind"].items()})
    least = scenarios.least_of_runs([first, again])
    assert least["count"] == own["count"]
    assert least["max_ms"] <= min(first["decisions_own_cpu"]["max_ms"],
                                  again["decisions_own_cpu"]["max_ms"])
    assert least["median_ms"] <= max(first["decisions_own_cpu"]["median_ms"],
                                     again["decisions_own_cpu"]["median_ms"])
    other = dict(again, own_cpu_by_kind={k: v[:-1] for k, v in
                                         again["own_cpu_by_kind"].items()})
    with pytest.raises(RuntimeError, match="did not repeat the same decisions"):
        scenarios.least_of_runs([first, other])


def test_a_full_collection_in_a_decision_is_counted_apart_from_hybrids_own_time(
        monkeypatch) -> None:
    """A full garbage collection walks the whole process's objects (here mostly the
    simulation's), so its length is the heap's: the simulator counts it apart, and leaves
    its callback behind in no process."""
    import gc

    from hybrid.adaptive import PoolAdaptive

    steps: list[int] = []
    adapt = PoolAdaptive.adapt

    async def collecting_adapt(self: PoolAdaptive) -> None:
        if not steps:
            gc.collect()  # one full collection, in the first adaptive step
        steps.append(1)
        await adapt(self)

    monkeypatch.setattr(PoolAdaptive, "adapt", collecting_adapt)
    callbacks = list(gc.callbacks)
    found = scenarios.over_submission("hybrid", scale=0.05)
    assert gc.callbacks == callbacks
    collections = found["collections_in_decisions"]
    assert collections["count"] >= 1, found
    # the step with the collection took longer than any decision's own time
    assert found["decisions_cpu"]["max_ms"] >= collections["max_ms"]
    assert found["decisions_own_cpu"]["max_ms"] < collections["max_ms"], found


def test_a_worker_that_joins_before_a_query_saw_its_job_start_is_no_eviction() -> None:
    """A job seen waiting (its start count 0), then started, its worker connected before the
    next query: the worker marks the job running, and the query's start count 1 is its first
    run, not a restart between two looks (that was read as an eviction: on HTCondor, whose
    JobRunCount goes 0 -> 1, with a worker that starts within one poll of its job)."""
    from benchmarks.queue_simulator import QueueModel, Simulation

    sim = Simulation(seed=7, poll=10.0)
    pool = sim.add_pool("cpu", QueueModel(slots=4, wait=("uniform", 1.0, 25.0),
                                          startup=1.0), cores=1, nanny=False)
    scaled: list[bool] = []

    async def scale_once() -> None:
        if not scaled:
            scaled.append(True)
            await sim.manager.scale(pool, 4)

    sim.add_controller(3600.0, scale_once, "scale once")
    sim.burst(0.0, 40, ("lognormal", 60.0, 0.3))
    sim.run(until=3600.0)
    assert sim.evictions == 0 and len(pool._connected) >= 4
    assert pool.evictions == 0, pool.evicted
