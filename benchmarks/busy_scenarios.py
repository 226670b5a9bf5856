"""The busy-facility scenarios of the batch-queue SIMULATOR (:mod:`benchmarks.queue_simulator`).

Each scenario builds a simulated facility, runs hybrid's own pool manager and adaptivity on
it (and, where the issue compares, a MODEL of dask-jobqueue's adaptivity on the same queue and
workload) and returns its numbers. ``scale`` shrinks a scenario for the test suite's quick
tier (``tests/simulator``); ``scale=1`` is what ``python -m benchmarks --only busy-sim``
runs and docs/benchmarks.md shows.

:class:`JobqueueModel` is not dask-jobqueue: it is distributed's own ``AdaptiveCore`` (its
``recommendations`` and ``wait_count``) given what dask-jobqueue's ``JobQueueCluster`` (a
``SpecCluster``) gives it: ``plan``/``requested`` are its worker specs (pending jobs
included), ``observed`` the connected workers, the target is the scheduler's
``adaptive_target`` formula (``distributed.adaptive.target-duration`` 5 s, 0.5 s for a task
of unknown duration), scaling up submits one job per worker, scaling down cancels the jobs
not yet arrived first and retires the others, and a worker lost for 15 s
(``distributed.deploy.lost-worker-timeout``) gets a new job under the same spec. The real
dask-jobqueue runs side by side with hybrid on the real pools (:mod:`benchmarks.busy`).
"""

from __future__ import annotations

import itertools
import math
import statistics
import time
from typing import Any

from distributed.deploy.adaptive_core import AdaptiveCore

from benchmarks.queue_simulator import QueueModel, Simulation
from hybrid.pools import PoolSpec

HOUR = 3600.0


class JobqueueModel(AdaptiveCore):
    """A MODEL of dask-jobqueue's adaptivity in the simulator (see the module docstring)."""

    def __init__(self, sim: Simulation, pool: str, spec: PoolSpec, minimum: int = 0,
                 maximum: int = 10, wait_count: int = 3, target_duration: float = 5.0):
        super().__init__(minimum=minimum, maximum=maximum, wait_count=wait_count)
        self.sim, self.pool, self.spec = sim, pool, spec
        self.system = sim.systems[pool]
        self.target_duration = target_duration
        self.specs: dict[str, str | None] = {}  # spec name -> its current job
        self.lost_since: dict[str, float] = {}
        self.names = itertools.count()

    def _worker_of(self, name: str) -> str | None:
        job_id = self.specs.get(name)
        return self.sim.worker_of.get(job_id) if job_id else None

    @property
    def plan(self) -> set[str]:
        return set(self.specs)

    @property
    def requested(self) -> set[str]:
        return set(self.specs)

    @property
    def observed(self) -> set[str]:
        return {n for n in self.specs if self._worker_of(n) in self.sim.workers}

    async def target(self) -> int:
        sim = self.sim
        done = [t.duration for t in sim.tasks.values() if t.state == "done"][-200:]
        duration = statistics.mean(done) if done else 0.5  # the prefix's, or unknown
        workers = [w for w in sim.workers.values() if w.pool == self.pool]
        queued = len(sim.queued[None])
        processing = sum(len(w.running) for w in workers)
        cpu = math.ceil((queued + processing) * duration / self.target_duration)
        ready = queued
        for worker in workers:  # "avoid a few long tasks from asking for many cores"
            if ready > cpu:
                break
            ready += len(worker.running)
        else:
            cpu = min(ready, cpu)
        if workers:
            cpu = math.ceil(cpu / sum(w.threads for w in workers) * len(workers))
        if queued and not workers:
            cpu = max(1, cpu)
        if cpu < len(workers):  # scale down, keeping workers for the results held
            closable = [w for w in workers if not w.running]
            if any(w.holds for w in workers):
                closable = sorted(closable, key=lambda w: len(w.holds))[:len(workers) - 1]
            return len(workers) - len(closable)
        return cpu

    async def workers_to_close(self, target: int) -> list[str]:
        idle = [n for n in self.observed if not self.sim.workers[self._worker_of(n)].running]
        idle.sort(key=lambda n: len(self.sim.workers[self._worker_of(n)].holds))
        return idle[:max(0, len(self.observed) - target)]

    async def scale_up(self, n: int) -> None:
        for _ in range(n - len(self.specs)):
            name = f"w{next(self.names)}"
            self.specs[name] = self._submit()

    def _submit(self) -> str:
        return self.sim.submit_jobs(self.system, self.sim.cluster, self.spec, 1)[0]

    async def scale_down(self, workers: list[str]) -> None:
        for name in workers:
            address = self._worker_of(name)
            job_id = self.specs.pop(name, None)
            if address in self.sim.workers:
                self.sim.retire(address, close=True, leaving={address})
            if job_id:
                self.sim.end_job(job_id, "removed", "cancelled")

    async def adapt(self) -> None:
        now = self.sim.clock.now
        for name, job_id in list(self.specs.items()):  # SpecCluster's lost workers
            job = self.sim.jobs.get(job_id) if job_id else None
            if job is not None and job.state in ("pending", "running"):
                self.lost_since.pop(name, None)
                continue
            since = self.lost_since.setdefault(name, now)
            if now - since >= 15.0:
                self.specs[name] = self._submit()
                self.lost_since.pop(name, None)
        await super().adapt()


def _percentiles(values: list[float]) -> dict[str, float]:
    if not values:
        return {"median_ms": math.nan, "p99_ms": math.nan, "max_ms": math.nan, "count": 0}
    ordered = sorted(values)
    return {"median_ms": 1000 * statistics.median(ordered),
            "p99_ms": 1000 * ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))],
            "max_ms": 1000 * ordered[-1], "count": len(ordered)}


def _finish(sim: Simulation, started: float, **numbers: Any) -> dict[str, Any]:
    def ours(found: dict[str, list[float]]) -> list[float]:
        return [t for kind, times in found.items() if kind != "jobqueue" for t in times]

    return {"makespan_s": sim.makespan(), "recomputed": sim.recomputed(),
            "recompute_causes": dict(sim.recompute_causes),
            "evictions": sim.evictions, "walltime_kills": sim.walltime_kills,
            "jobs": sum(s.submitted for s in sim.systems.values()),
            "submit_calls": sum(s.submit_calls for s in sim.systems.values()),
            "decisions": _percentiles(ours(sim.decisions)),
            "decisions_cpu": _percentiles(ours(sim.cpu_decisions)),
            "decisions_own_cpu": _percentiles(ours(sim.own_cpu_decisions)),
            "collections_in_decisions": _percentiles(sim.collections_in_decisions),
            "own_cpu_by_kind": {kind: list(times) for kind, times
                                in sim.own_cpu_decisions.items() if kind != "jobqueue"},
            "model_decisions": _percentiles(sim.decisions.get("jobqueue", [])),
            "model_decisions_cpu": _percentiles(sim.cpu_decisions.get("jobqueue", [])),
            "wall_s": time.perf_counter() - started, **numbers}


def least_of_runs(days: list[dict[str, Any]]) -> dict[str, float]:
    """The percentiles of hybrid's own CPU time per decision, each decision counted at the
    least it took over ``days`` (runs of the same deterministic scenario: the same
    decisions in the same order; what the machine's other work adds to one run's decision
    is not the decision's cost)."""
    runs = [day["own_cpu_by_kind"] for day in days]
    shape = {kind: len(times) for kind, times in runs[0].items()}
    if any({kind: len(times) for kind, times in run.items()} != shape for run in runs):
        raise RuntimeError("the runs did not repeat the same decisions: "
                           f"{[{k: len(t) for k, t in run.items()} for run in runs]}")
    return _percentiles([min(each) for kind in shape
                         for each in zip(*(run[kind] for run in runs), strict=True)])


# ---------------------------------------------------------------------------- scenarios
def over_submission(policy: str = "hybrid", scale: float = 1.0, seed: int = 1
                    ) -> dict[str, Any]:
    """A burst on a busy queue with fewer slots than the adaptive maximum: how many jobs go
    out for the ``maximum`` that are needed (hybrid <= 1.1)."""
    started = time.perf_counter()
    sim = Simulation(seed=seed, poll=10.0)
    maximum = max(4, int(40 * scale))
    model = QueueModel(slots=max(2, maximum // 4), wait=("lognormal", 600.0, 0.6),
                       startup=30.0)
    tasks = 10 * maximum
    sim.burst(0.0, tasks, ("lognormal", 120.0, 0.5))
    if policy == "hybrid":
        sim.add_pool("cpu", model, cores=1, nanny=False)
        sim.adapt("cpu", minimum=0, maximum=maximum, interval=2.0)
    else:
        system = _queue_only(sim, "cpu", model)
        baseline = JobqueueModel(sim, "cpu", system, minimum=0, maximum=maximum)
        sim.add_controller(1.0, baseline.adapt, "jobqueue")
    sim.run(until=12 * HOUR)
    return _finish(sim, started, needed=maximum,
                   ratio=sim.submitted("cpu") / maximum,
                   most_queued=sim.most_jobs.get("cpu", 0), maximum=maximum,
                   first_submission=_first_submission(sim, "cpu"))


def walltime(policy: str = "hybrid", scale: float = 1.0, seed: int = 2) -> dict[str, Any]:
    """Eight hours of work on jobs with a one-hour walltime: tasks recomputed because a
    walltime ended (hybrid: 0). ``policy``: ``hybrid`` (its auto lifetime), ``hybrid, no
    lifetime`` (``lifetime="off"``), or ``dask-jobqueue model``."""
    started = time.perf_counter()
    sim = Simulation(seed=seed, poll=10.0)
    maximum = max(4, int(20 * scale))
    model = QueueModel(slots=maximum, wait=("uniform", 60.0, 600.0), startup=30.0)
    hours = 8
    for hour in range(hours * 2):  # every half hour 35 minutes of work, tasks of 30 s to 3 min
        sim.burst(hour * 1800.0, int(maximum * 20), ("uniform", 30.0, 180.0))
    options = {"cores": 1, "nanny": False, "walltime": "01:00"}
    if policy.startswith("hybrid"):
        if "no lifetime" in policy:
            options["lifetime"] = "off"
        sim.add_pool("cpu", model, **options)
        sim.adapt("cpu", minimum=0, maximum=maximum, interval=5.0)
    else:
        system = _queue_only(sim, "cpu", model, **options, lifetime="off")
        baseline = JobqueueModel(sim, "cpu", system, minimum=0, maximum=maximum)
        sim.add_controller(1.0, baseline.adapt, "jobqueue")
    sim.run(until=(hours + 4) * HOUR)
    return _finish(sim, started, walltimes=hours)


def evictions(requeue: bool = True, scale: float = 1.0, seed: int = 3) -> dict[str, Any]:
    """Jobs evicted at random (requeued, or preempted out of the queue): every eviction is
    seen as one, none counts as a failure, the work completes."""
    started = time.perf_counter()
    sim = Simulation(seed=seed, poll=10.0)
    maximum = max(4, int(30 * scale))
    model = QueueModel(slots=maximum, wait=("uniform", 30.0, 300.0), startup=30.0,
                       evictions_per_hour=1.0, requeue=requeue)
    for hour in range(8):
        sim.burst(hour * HOUR, maximum * 8, ("lognormal", 240.0, 0.4))
    pool = sim.add_pool("cpu", model, cores=1, nanny=False)
    sim.adapt("cpu", minimum=0, maximum=maximum, interval=5.0)
    sim.run(until=12 * HOUR)
    return _finish(sim, started, seen=pool.evictions, failures=pool.failures,
                   gave_up=pool.failed)


def fallback(with_fallback: bool = True, scale: float = 1.0, seed: int = 4
             ) -> dict[str, Any]:
    """A burst on a busy preferred pool (large, slow to start) with or without a fast capped
    pool to fall back to: the makespans (goal: <= 0.7x the busy pool alone)."""
    started = time.perf_counter()
    sim = Simulation(seed=seed, poll=10.0)
    big = max(8, int(100 * scale))
    sim.burst(0.0, big * 10, ("lognormal", 120.0, 0.4))
    sim.add_pool("slow", QueueModel(slots=big, wait=("lognormal", 1800.0, 0.5),
                                    startup=60.0), cores=1, nanny=False)
    sim.adapt("slow", minimum=0, maximum=big, interval=5.0)
    fast = None
    if with_fallback:
        cap = max(4, big // 2)
        fast = sim.add_pool("fast", QueueModel(slots=cap, wait=("uniform", 5.0, 20.0),
                                               startup=15.0), cores=1, nanny=False)
        sim.adapt("fast", minimum=0, maximum=cap, interval=5.0)
        sim.manager.prefer(["slow", "fast"], fallback_after="5 minutes")
    sim.run(until=12 * HOUR)
    # the moment the fast pool had shrunk back to nothing while work was left, if any
    peak = max((jobs.get("fast", (0, 0))[0] for _, jobs, _ in sim.trace), default=0)
    peaked = False
    shrank = None
    for when, jobs, left in sim.trace:
        fast_jobs = jobs.get("fast", (0, 0))[0]
        peaked = peaked or (peak > 0 and fast_jobs == peak)
        if peaked and fast_jobs == 0 and left > 0 and jobs["slow"][1] > 0:
            shrank = when
            break
    return _finish(sim, started, slow_jobs=sim.submitted("slow"),
                   fast_jobs=sim.submitted("fast") if fast is not None else 0,
                   fast_peak=peak, fast_gone_with_work_left_s=shrank)


def facility(scale: float = 1.0, seed: int = 5, interval: float = 15.0) -> dict[str, Any]:
    """Eight hours of a busy facility, about 10,000 jobs at ``scale=1``: a large Slurm-like
    pool that is slow to start (walltime 1 h, rare evictions) falling back to a capped
    Kubernetes-like pool, and a GPU pool (walltime 2 h, frequent evictions); bursts of CPU
    and GPU work every half hour. The numbers: decision times, recomputed tasks, evictions."""
    started = time.perf_counter()
    sim = Simulation(seed=seed, poll=interval)
    cpu_max, k8s_max, gpu_max = (max(8, int(n * scale)) for n in (700, 100, 100))
    slurm = sim.add_pool("slurm", QueueModel(
        slots=int(cpu_max * 0.75), wait=("lognormal", 900.0, 0.6), startup=60.0,
        evictions_per_hour=0.05), cores=1, nanny=False, walltime="01:00",
        lifetime="45 minutes")  # the drain leaves room for its longest tasks
    k8s = sim.add_pool("k8s", QueueModel(slots=k8s_max, wait=("uniform", 5.0, 30.0),
                                         startup=20.0), cores=1, nanny=False)
    gpu = sim.add_pool("gpu", QueueModel(
        slots=gpu_max, wait=("lognormal", 300.0, 0.5), startup=60.0,
        evictions_per_hour=0.3), cores=1, gpus=1, nanny=False, walltime="02:00")
    sim.adapt("slurm", minimum=0, maximum=cpu_max, interval=interval)
    sim.adapt("k8s", minimum=0, maximum=k8s_max, interval=interval)
    sim.adapt("gpu", minimum=0, maximum=gpu_max, interval=interval)
    sim.manager.prefer(["slurm", "k8s"], fallback_after="10 minutes")
    for half_hour in range(16):
        at = half_hour * 1800.0
        sim.burst(at, int(cpu_max * 4), ("lognormal", 240.0, 0.5))
        sim.burst(at + 600.0, int(gpu_max * 2), ("lognormal", 600.0, 0.3), kind="GPU")
    sim.run(until=8 * HOUR)
    pools = (slurm, k8s, gpu)
    return _finish(sim, started, seen=sum(p.evictions for p in pools),
                   failures=sum(p.failures for p in pools),
                   gave_up=[p.name for p in pools if p.failed],
                   most_queued={p.name: sim.most_jobs.get(p.name, 0) for p in pools},
                   most_counted={p.name: sim.most_counted.get(p.name, 0) for p in pools},
                   maximum={"slurm": cpu_max, "k8s": k8s_max, "gpu": gpu_max},
                   finished_bursts=sum(1 for b in sim.bursts.values() if b.finished),
                   bursts=len(sim.bursts))


def _queue_only(sim: Simulation, name: str, model: QueueModel, **options: Any) -> PoolSpec:
    """A simulated queue with no hybrid pool on it (for the model of dask-jobqueue)."""
    from benchmarks.queue_simulator import SimulatedBatchSystem

    sim.systems[name] = SimulatedBatchSystem(sim, name, model)
    sim.waiting[name], sim.running[name], sim.active[name] = [], 0, 0
    return PoolSpec.build(name, "slurm", check_paths=False, **options)


def _first_submission(sim: Simulation, pool: str) -> int:
    """How many jobs the first submission of ``pool`` held."""
    calls = sim.systems[pool].calls
    return calls[0] if calls else 0
