"""A deterministic batch-queue SIMULATOR: a busy facility in simulated time.

This is a test double of a whole facility (batch queues, their workers and a Dask
scheduler), not a user-facing system and not part of the ``hybrid`` package. It drives
hybrid's OWN :class:`~hybrid.manager.PoolManager` and :class:`~hybrid.adaptive.PoolAdaptive`
(the same objects a :class:`~hybrid.HybridCluster` uses) through two doubles:

- :class:`SimulatedBatchSystem`, a :class:`~hybrid.batch.BatchSystem` whose queue holds a
  pool's jobs: each job waits a queue wait drawn from the pool's :class:`QueueModel`, then
  starts when one of the pool's slots is free (first come, first served), runs until its
  walltime, an eviction (requeued, or preempted out of the queue) or its worker leaves;
- :class:`SimulatedScheduler`, what the manager calls on a scheduler (``identity``,
  ``run_function`` of the demand probe, ``retire_workers``, ``broadcast`` of a drain), over
  simulated workers that run simulated tasks: a worker joins a while after its job starts,
  runs one task per thread, holds its results until their burst of work completes, and
  loses them (they are recomputed) when it dies instead of retiring.

Time is a number the simulation advances from event to event (``manager.clock`` is set to
it), so eight hours of a facility run in seconds, and the same seed gives the same run.
Only the wall time each of hybrid's decisions takes (an adaptive step, a reconcile) is
measured on the real clock. The scenarios are :mod:`benchmarks.busy_scenarios`.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import heapq
import itertools
import logging
import math
import pickle
import random
import tempfile
import time
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import dask

from hybrid.batch import BatchSystem, JobState, JobStatus, WorkerJob
from hybrid.batch.jobs import worker_name_suffix
from hybrid.manager import ManagedPool, PoolManager
from hybrid.pools import PoolSpec
from hybrid.routing import GPU
from hybrid.worker import Connection


def _times() -> tuple[float, float]:
    return time.perf_counter(), time.thread_time()


@contextlib.contextmanager
def _booked(sim: Simulation) -> Iterator[None]:
    """The CPU time of the block is the simulated facility's, not hybrid's
    (``Simulation.double_cpu``)."""
    started = time.thread_time()
    try:
        yield
    finally:
        sim.double_cpu += time.thread_time() - started


def _double(method: Any) -> Any:
    """A method of the doubles (the simulated batch system and scheduler), booked by
    :func:`_booked`."""
    if asyncio.iscoroutinefunction(method):
        async def booked_async(self: Any, *args: Any, **kwargs: Any) -> Any:
            with _booked(self.sim):
                return await method(self, *args, **kwargs)
        return functools.wraps(method)(booked_async)

    def booked(self: Any, *args: Any, **kwargs: Any) -> Any:
        with _booked(self.sim):
            return method(self, *args, **kwargs)
    return functools.wraps(method)(booked)


#: The address simulated workers "dial" (nothing listens: nothing is ever sent there).
SCHEDULER = "tcp://127.0.0.1:8786"


class Clock:
    """Simulated seconds since the start; ``manager.clock`` is this object."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@dataclass
class QueueModel:
    """How a simulated pool's queue treats its jobs."""

    #: Jobs that run at once (the pool's share of the facility).
    slots: int
    #: The queue wait before a job may start: ``("fixed", s)``, ``("uniform", lo, hi)`` or
    #: ``("lognormal", median, sigma)`` seconds.
    wait: tuple = ("fixed", 0.0)
    #: From a job's start until its worker has joined (seconds).
    startup: float = 20.0
    #: Evictions per running job and hour (Poisson).
    evictions_per_hour: float = 0.0
    #: An evicted job goes back to the queue (Slurm requeue, HTCondor vacate); else it
    #: leaves it (preempted).
    requeue: bool = True
    #: How long a requeued job waits before it may start again (Slurm: 120 s).
    requeue_delay: float = 120.0

    def sample_wait(self, rng: random.Random) -> float:
        kind, *args = self.wait
        if kind == "fixed":
            return float(args[0])
        if kind == "uniform":
            return rng.uniform(args[0], args[1])
        if kind == "lognormal":
            return args[0] * math.exp(rng.gauss(0.0, args[1]))
        raise ValueError(f"unknown queue wait {self.wait!r}")


@dataclass
class SimJob:
    job_id: str
    pool: str
    cluster: str
    spec: PoolSpec
    state: str = "pending"  # pending, running, finished, failed, removed
    eligible_at: float = 0.0
    started_at: float | None = None
    reason: str | None = None
    starts: int = 0
    evicted: bool = False
    #: The last answer about it (the same object while nothing changed).
    status: JobStatus | None = None


@dataclass
class SimTask:
    task_id: int
    kind: str | None  # GPU, or None for an unannotated (CPU) task
    duration: float
    burst: int
    state: str = "queued"  # queued, running, done, failed
    worker: str | None = None  # where it runs, or who holds its result
    starts: int = 0
    token: int = 0


@dataclass
class SimWorker:
    address: str
    name: str
    job_id: str
    pool: str
    threads: int
    serves: frozenset
    status: str = "running"  # running, draining
    running: set = field(default_factory=set)  # task ids (ints: a set's order is fixed)
    holds: set = field(default_factory=set)
    drain_deadline: float | None = None


@dataclass
class Burst:
    """Tasks that arrive together; their results are held until the last one is done."""

    burst_id: int
    arrives: float
    tasks: list[int]
    left: int = 0
    finished: float | None = None


class SimulatedBatchSystem(BatchSystem):
    """One simulated pool's queue, as a batch system (see the module docstring)."""

    name = "simulated"
    template = "slurm.sh.j2"
    answers_at_once = True  # its queue is a Python object: no thread needed

    def __init__(self, sim: Simulation, pool: str, model: QueueModel):
        super().__init__()
        self.sim = sim
        self.pool = pool
        self.model = model
        self.counter = itertools.count(1)
        self.submit_calls = 0
        self.submitted = 0
        #: The number of jobs of each submission, in order.
        self.calls: list[int] = []

    @_double
    def submit(self, job: WorkerJob, staging: Path, count: int) -> list[str]:
        return self.sim.submit_jobs(self, job.cluster, job.spec, count)

    @_double
    def query(self, cluster: str | None = None, job_ids: Iterable[str] | None = None,
              history: bool = False) -> list[JobStatus]:
        jobs = self.sim.jobs
        if job_ids is None:
            chosen: Iterable[SimJob] = (j for j in jobs.values() if j.pool == self.pool)
        else:
            chosen = (jobs[j] for j in job_ids if j in jobs)
        out = []
        now = self.sim.clock.now
        for job in chosen:
            state = _STATES[job.state]
            if not history and not state.active:
                continue
            if cluster is not None and job.cluster != cluster:
                continue
            reason = job.reason
            if job.state == "pending" and reason is None:  # as Slurm says it
                reason = "Resources" if job.eligible_at <= now else "Priority"
            status = job.status
            if status is None or (status.state, status.reason, status.starts,
                                  status.evicted) != (state, reason, job.starts, job.evicted):
                status = job.status = JobStatus(
                    job.job_id, state, reason, job.cluster, job.pool, SCHEDULER,
                    starts=job.starts, evicted=job.evicted)
            out.append(status)
        return out

    @_double
    def remove(self, job_ids: Iterable[str]) -> None:
        for job_id in job_ids:
            self.sim.end_job(job_id, "removed", "removed by hybrid")


_STATES = {"pending": JobState.pending, "running": JobState.running,
           "finished": JobState.finished, "failed": JobState.failed,
           "removed": JobState.removed}


class SimulatedScheduler:
    """What the pool manager calls on a scheduler, answered from the simulation."""

    def __init__(self, sim: Simulation):
        self.sim = sim
        self.names: dict[bytes, str] = {}

    @_double
    async def identity(self) -> dict[str, Any]:
        if self.sim.identity is None:  # made again only when a worker came, went or drains
            self.sim.identity = {"workers": {a: {"name": w.name, "status": w.status}
                                             for a, w in self.sim.workers.items()}}
        return self.sim.identity

    @_double
    async def get_metadata(self, keys: list[str], default: Any = None) -> Any:
        return default  # no other client closes a simulated cluster

    @_double
    async def run_function(self, function: bytes, args: bytes, kwargs: bytes,
                           wait: bool = True) -> dict[str, Any]:
        name = self.names.get(function)
        if name is None:  # a real scheduler unpickles it each time; the double, once
            name = self.names[function] = pickle.loads(function).__name__
        options = pickle.loads(kwargs)
        if name == "resource_demand":
            return {"status": "OK", "result": self.sim.demand()}
        if name == "fail_unrunnable":
            return {"status": "OK", "result": self.sim.fail_tasks(options["resources"])}
        return {"status": "error", "exception": f"the simulator does not run {name}"}

    @_double
    async def retire_workers(self, workers: list[str], close_workers: bool = False,
                             remove: bool = True, **_: Any) -> dict[str, Any]:
        retired = {}
        for address in workers:
            if self.sim.retire(address, close=close_workers, leaving=set(workers)):
                retired[address] = {}
        return retired

    @_double
    async def broadcast(self, msg: dict, workers: list[str], **_: Any) -> dict[str, Any]:
        function = pickle.loads(msg["function"])
        if function.__name__ == "drain_worker":
            options = pickle.loads(msg["kwargs"])
            for address in workers:
                self.sim.drain(address, options.get("deadline"))
        return {}


class Simulation:
    """Pools, their queues, workers, tasks and the events between them."""

    def __init__(self, seed: int = 0, poll: float = 10.0, cluster: str = "sim"):
        self.clock = Clock()
        self.rng = random.Random(seed)
        self.poll = poll
        self.cluster = cluster
        self.events: list[tuple[float, int, str, Any]] = []
        self.seq = itertools.count()
        self.jobs: dict[str, SimJob] = {}
        #: Per pool: its pending jobs by when they may start, and its jobs in the queue.
        self.waiting: dict[str, list[tuple[float, int, str]]] = {}
        self.running: dict[str, int] = {}
        self.active: dict[str, int] = {}
        self.systems: dict[str, SimulatedBatchSystem] = {}
        self.workers: dict[str, SimWorker] = {}
        #: The scheduler's identity answer, while no worker changed.
        self.identity: dict[str, Any] | None = None
        #: Tasks running, by kind.
        self.running_tasks: dict[str | None, int] = {GPU: 0, None: 0}
        self.worker_of: dict[str, str] = {}
        self.queued: dict[str | None, deque[int]] = {GPU: deque(), None: deque()}
        self.tasks: dict[int, SimTask] = {}
        self.bursts: dict[int, Burst] = {}
        #: Workers with a free thread (a dict: its order is the same on every run).
        self.free: dict[str, None] = {}
        self.addresses = itertools.count(1)
        self.scheduler = SimulatedScheduler(self)
        self.manager = PoolManager(cluster, Connection(SCHEDULER), self.scheduler)
        self.manager.clock = self.clock
        self.controllers: list[tuple[float, Any]] = []
        #: Wall seconds of each decision of hybrid (adaptive step, reconcile) and of any
        #: other controller, by kind; and the CPU seconds of each (this thread's: on a
        #: shared machine the wall time also holds the time other processes had the CPU).
        self.decisions: dict[str, list[float]] = {}
        self.cpu_decisions: dict[str, list[float]] = {}
        #: The CPU seconds of each decision less those spent in the doubles (the simulated
        #: batch system's query, submit, remove; the simulated scheduler's answers): what
        #: hybrid's own code took, by kind.
        self.own_cpu_decisions: dict[str, list[float]] = {}
        #: CPU seconds spent in the doubles so far.
        self.double_cpu = 0.0
        #: CPU seconds of the interpreter's full garbage collections so far, and those of
        #: each decision that had one: a full collection walks every object of the process
        #: (here mostly the simulation's own), so its length is the heap's, not the
        #: decision's. They are left out of hybrid's own time and counted here instead.
        self.collector_cpu = 0.0
        self.collections_in_decisions: list[float] = []
        self._collection_started: float | None = None
        #: Why tasks ran again: cause -> tasks.
        self.recompute_causes: dict[str, int] = {}
        #: The most jobs each pool had queued and running at once; and of those, the most
        #: that counted toward its target (not retiring at the end of their lifetime).
        self.most_jobs: dict[str, int] = {}
        self.most_counted: dict[str, int] = {}
        #: Every poll: (time, {pool: (jobs counted, workers connected)}, tasks not done).
        self.trace: list[tuple[float, dict[str, tuple[int, int]], int]] = []
        self.evictions = 0
        self.walltime_kills = 0
        self.closing = False
        #: The level of hybrid's log while the simulation runs.
        self.log_level = logging.ERROR

    # ------------------------------------------------------------------ building
    def add_pool(self, name: str, model: QueueModel, **options: Any) -> ManagedPool:
        """A pool of hybrid's manager on a simulated queue (options: ``add_pool``'s)."""
        spec = PoolSpec.build(name, "slurm", check_paths=False, **options)
        system = SimulatedBatchSystem(self, name, model)
        self.systems[name] = system
        self.waiting[name], self.running[name], self.active[name] = [], 0, 0
        return self.manager.add(spec, system)

    def adapt(self, pool: str, minimum: int = 0, maximum: int = 10, interval: float = 10.0,
              wait_count: int = 3) -> Any:
        """hybrid's own adaptivity for a pool, stepped by the simulation."""
        from hybrid.adaptive import PoolAdaptive

        managed = self.manager.pool(pool)
        adaptive = PoolAdaptive(self.manager, managed, minimum=minimum, maximum=maximum,
                                interval=interval, wait_count=wait_count)
        managed.adaptive = adaptive
        self.at(0.0, "step", (interval, adaptive.adapt, f"adapt {pool}"))
        return adaptive

    def add_controller(self, interval: float, step: Any, kind: str) -> None:
        """Another policy stepped every ``interval`` (a baseline to compare with)."""
        self.at(0.0, "step", (interval, step, kind))

    def burst(self, at: float, count: int, duration: tuple, kind: str | None = None) -> int:
        """``count`` tasks arriving at ``at``; ``duration`` as a queue wait is given."""
        burst_id = len(self.bursts)
        model = QueueModel(slots=0, wait=duration)
        ids = []
        for _ in range(count):
            task = SimTask(len(self.tasks), kind, max(0.01, model.sample_wait(self.rng)),
                           burst_id)
            self.tasks[task.task_id] = task
            ids.append(task.task_id)
        self.bursts[burst_id] = Burst(burst_id, at, ids, left=count)
        self.at(at, "burst", burst_id)
        return burst_id

    def at(self, when: float, kind: str, payload: Any) -> None:
        heapq.heappush(self.events, (when, next(self.seq), kind, payload))

    # ------------------------------------------------------------------ running
    def run(self, until: float) -> None:
        """Run the simulation to ``until`` simulated seconds (then close the manager)."""
        hybrid_log = logging.getLogger("hybrid")
        level = hybrid_log.level
        hybrid_log.setLevel(self.log_level)  # thousands of evictions: not on the console
        gc.callbacks.append(self._collection)
        try:
            with tempfile.TemporaryDirectory(prefix="hybrid-sim-") as staging, \
                    dask.config.set({"hybrid.batch.staging-directory": staging,
                                     "hybrid.batch.poll-interval": f"{self.poll}s",
                                     "hybrid.batch.stuck-timeout": "1 day"}):
                asyncio.run(self._run(until))
        finally:
            gc.callbacks.remove(self._collection)
            hybrid_log.setLevel(level)

    def _collection(self, phase: str, info: dict[str, int]) -> None:
        """``gc.callbacks``: the CPU time of each full collection (:attr:`collector_cpu`)."""
        if info.get("generation") != 2:
            return
        if phase == "start":
            self._collection_started = time.thread_time()
        elif self._collection_started is not None:
            self.collector_cpu += time.thread_time() - self._collection_started
            self._collection_started = None

    async def _run(self, until: float) -> None:
        self.at(0.0, "reconcile", None)
        while self.events and self.events[0][0] <= until:
            when, _, kind, payload = heapq.heappop(self.events)
            self.clock.now = when
            await self._handle(kind, payload)
            self._dispatch()
            if kind == "reconcile" and self._done():
                break
        self.clock.now = min(until, self.clock.now)
        self.closing = True  # what closing loses is not the policy's doing
        await self.manager.close(timeout=5)

    async def _handle(self, kind: str, payload: Any) -> None:
        now = self.clock.now
        if kind == "burst":
            for task_id in self.bursts[payload].tasks:
                self.queued[self.tasks[task_id].kind].append(task_id)
        elif kind == "eligible":
            self._start_jobs(payload)
        elif kind == "connect":
            self._connect(*payload)
        elif kind == "task":
            self._task_done(*payload)
        elif kind == "walltime":
            job_id, starts = payload
            job = self.jobs[job_id]
            if job.state == "running" and job.starts == starts:
                self.walltime_kills += 1
                self.end_job(job_id, "failed", "TIMEOUT")
        elif kind == "evict":
            self._evict(*payload)
        elif kind == "deadline":  # distributed's own --lifetime: the worker stops itself
            address, job_id = payload
            if address in self.workers:
                self.retire(address, close=True, leaving={address}, forced=True)
        elif kind == "drain":
            self._drain_step(payload)
        elif kind == "step":
            interval, step, label = payload
            started = self._started()
            await step()
            self._decided(label.split()[0], started)
            self._count_counted()
            self.at(now + interval, "step", payload)
        elif kind == "reconcile":
            # as the manager's own loop does it: the scheduler's workers first, then each
            # pool's jobs (hybrid.manager.core.PoolManager._reconcile_forever)
            live = await self.manager.live_workers()
            for pool in list(self.manager.pools.values()):
                if pool.used:
                    started = self._started()
                    await self.manager.pool_workers(pool, live)
                    await self.manager.reconcile(pool)
                    self._decided("reconcile", started)
            self._sample()
            self.at(now + self.poll, "reconcile", None)

    def _count_counted(self) -> None:
        for name, pool in self.manager.pools.items():
            counted = len(pool.counted())
            if counted > self.most_counted.get(name, 0):
                self.most_counted[name] = counted

    def _sample(self) -> None:
        """One point of :attr:`trace`: per pool, jobs counted toward its target and its
        connected workers; and the tasks not yet done."""
        workers: dict[str, int] = {}
        for worker in self.workers.values():
            workers[worker.pool] = workers.get(worker.pool, 0) + 1
        left = sum(b.left for b in self.bursts.values() if b.arrives <= self.clock.now)
        self.trace.append((self.clock.now, {
            name: (len(pool.counted()), workers.get(name, 0))
            for name, pool in self.manager.pools.items()}, left))

    def _started(self) -> tuple[float, float, float, float]:
        """Wall and CPU time now, the doubles' CPU time and the full collections' so far:
        a decision's start."""
        return (*_times(), self.double_cpu, self.collector_cpu)

    def _decided(self, kind: str, started: tuple[float, float, float, float]) -> None:
        wall, cpu = _times()
        collections = self.collector_cpu - started[3]
        if collections:
            self.collections_in_decisions.append(collections)
        self.decisions.setdefault(kind, []).append(wall - started[0])
        self.cpu_decisions.setdefault(kind, []).append(cpu - started[1])
        self.own_cpu_decisions.setdefault(kind, []).append(
            max(0.0, cpu - started[1] - (self.double_cpu - started[2]) - collections))

    def _done(self) -> bool:
        """Every burst through and no job left in any queue (nothing more can happen but
        control steps)."""
        return (all(b.finished is not None for b in self.bursts.values())
                and not any(self.active.values()))

    # ------------------------------------------------------------------ the queue
    def submit_jobs(self, system: SimulatedBatchSystem, cluster: str, spec: PoolSpec,
                    count: int) -> list[str]:
        system.submit_calls += 1
        system.submitted += count
        system.calls.append(count)
        ids = []
        for _ in range(count):
            job_id = f"{system.pool}.{next(system.counter)}"
            eligible = self.clock.now + system.model.sample_wait(self.rng)
            self.jobs[job_id] = SimJob(job_id, system.pool, cluster, spec,
                                       eligible_at=eligible)
            heapq.heappush(self.waiting[system.pool], (eligible, next(self.seq), job_id))
            self.at(eligible, "eligible", system.pool)
            ids.append(job_id)
        self.active[system.pool] += count
        self.most_jobs[system.pool] = max(self.most_jobs.get(system.pool, 0),
                                          self.active[system.pool])
        return ids

    def _start_jobs(self, pool: str) -> None:
        system = self.systems[pool]
        now = self.clock.now
        waiting = self.waiting[pool]
        while waiting and waiting[0][0] <= now and self.running[pool] < system.model.slots:
            eligible, _, job_id = heapq.heappop(waiting)
            job = self.jobs[job_id]
            if job.state != "pending" or job.eligible_at != eligible:
                continue  # removed, or requeued with a later time
            self.running[pool] += 1
            job.state, job.started_at, job.reason, job.evicted = "running", now, None, False
            job.starts += 1
            self.at(now + system.model.startup, "connect", (job.job_id, job.starts))
            walltime = job.spec.walltime_seconds()
            if walltime is not None:
                self.at(now + walltime, "walltime", (job.job_id, job.starts))
            rate = system.model.evictions_per_hour
            if rate > 0:
                self.at(now + self.rng.expovariate(rate / 3600.0), "evict",
                        (job.job_id, job.starts))

    def end_job(self, job_id: str, state: str, reason: str | None) -> None:
        job = self.jobs.get(job_id)
        if job is None or job.state not in ("pending", "running"):
            return
        was_running = job.state == "running"
        job.state, job.reason = state, reason
        self.active[job.pool] -= 1
        address = self.worker_of.pop(job_id, None)
        if address is not None and address in self.workers:
            self._lose(address, reason or state)
        if was_running:
            self.running[job.pool] -= 1
            self.at(self.clock.now, "eligible", job.pool)

    def _evict(self, job_id: str, starts: int) -> None:
        job = self.jobs[job_id]
        if job.state != "running" or job.starts != starts:
            return
        self.evictions += 1
        model = self.systems[job.pool].model
        if not model.requeue:
            job.evicted = True
            self.end_job(job_id, "removed", "PREEMPTED")
            return
        address = self.worker_of.pop(job_id, None)
        if address is not None and address in self.workers:
            self._lose(address, "eviction")
        self.running[job.pool] -= 1
        job.state, job.reason, job.evicted = "pending", "BeginTime", True
        job.eligible_at = self.clock.now + model.requeue_delay
        heapq.heappush(self.waiting[job.pool], (job.eligible_at, next(self.seq), job_id))
        self.at(job.eligible_at, "eligible", job.pool)
        self.at(self.clock.now, "eligible", job.pool)

    # ------------------------------------------------------------------ workers
    def _connect(self, job_id: str, starts: int) -> None:
        job = self.jobs[job_id]
        if job.state != "running" or job.starts != starts:
            return
        pool = self.manager.pools.get(job.pool)
        served = pool.served if pool is not None else {None}
        address = f"tcp://sim:{next(self.addresses)}"
        name = f"{job.cluster}-{job.pool}-{worker_name_suffix(job_id)}"
        threads = job.spec.tasks_per_job(self.manager.fraction)
        self.workers[address] = SimWorker(address, name, job_id, job.pool, threads,
                                          frozenset(served))
        self.identity = None
        self.worker_of[job_id] = address
        self.free[address] = None
        deadline = job.spec.worker_deadline_seconds()
        if deadline is not None:
            self.at(job.started_at + deadline, "deadline", (address, job_id))

    def _dispatch(self) -> None:
        if not self.free:
            return
        for address in list(self.free):
            worker = self.workers.get(address)
            if worker is None or worker.status != "running":
                self.free.pop(address, None)
                continue
            for kind in (GPU, None):
                if kind not in worker.serves:
                    continue
                queue = self.queued[kind]
                while queue and len(worker.running) < worker.threads:
                    task = self.tasks[queue.popleft()]
                    task.state, task.worker = "running", address
                    self.running_tasks[kind] += 1
                    task.starts += 1
                    task.token += 1
                    worker.running.add(task.task_id)
                    self.at(self.clock.now + task.duration, "task",
                            (task.task_id, address, task.token))
            if len(worker.running) >= worker.threads:
                self.free.pop(address, None)

    def _task_done(self, task_id: int, address: str, token: int) -> None:
        task = self.tasks[task_id]
        worker = self.workers.get(address)
        if worker is None or task.token != token or task.state != "running":
            return
        worker.running.discard(task_id)
        self.running_tasks[task.kind] -= 1
        task.state = "done"
        worker.holds.add(task_id)
        self.free[address] = None
        burst = self.bursts[task.burst]
        burst.left -= 1
        if burst.left == 0:  # its results are consumed: nobody holds them any more
            burst.finished = self.clock.now
            for done_id in burst.tasks:
                holder = self.workers.get(self.tasks[done_id].worker or "")
                if holder is not None:
                    holder.holds.discard(done_id)
        if worker.status == "draining":
            self._drain_step(address)

    def _requeue(self, task_ids: Iterable[int], cause: str) -> None:
        for task_id in task_ids:
            task = self.tasks[task_id]
            if task.state == "done":  # a result lost before its burst was through
                self.bursts[task.burst].left += 1
            if task.state == "running":
                self.running_tasks[task.kind] -= 1
            if task.state in ("running", "done") and not self.closing:
                key = f"{cause}: {'result lost' if task.state == 'done' else 'run cut'}"
                self.recompute_causes[key] = self.recompute_causes.get(key, 0) + 1
                task.state, task.worker = "queued", None
                self.queued[task.kind].appendleft(task_id)

    def _lose(self, address: str, cause: str) -> None:
        """A worker dies: what it ran and what it held are computed again."""
        worker = self.workers.pop(address)
        self.identity = None
        self.free.pop(address, None)
        self._requeue(list(worker.running) + list(worker.holds), cause)

    def retire(self, address: str, close: bool, leaving: set[str],
               forced: bool = False) -> bool:
        """distributed's graceful retirement: its results move to a worker that stays (none:
        refused, unless ``forced``, when they are lost); its running tasks are cut."""
        worker = self.workers.get(address)
        if worker is None:
            return False
        others = [a for a, w in self.workers.items()
                  if a not in leaving and w.status == "running"]
        if worker.holds and not others and not forced:
            return False
        for index, task_id in enumerate(sorted(worker.holds)):
            if others:
                self.tasks[task_id].worker = others[index % len(others)]
                self.workers[others[index % len(others)]].holds.add(task_id)
        cause = "worker deadline" if forced else "retired"
        if not others:
            self._requeue(list(worker.holds), cause)
        self._requeue(list(worker.running), cause)
        del self.workers[address]
        self.identity = None
        self.free.pop(address, None)
        self.worker_of.pop(worker.job_id, None)
        if close:
            self.end_job(worker.job_id, "finished", None)
        return True

    def drain(self, address: str, deadline: float | None) -> None:
        worker = self.workers.get(address)
        if worker is None or worker.status != "running":
            return
        worker.status = "draining"
        self.identity = None
        worker.drain_deadline = None if deadline is None else self.clock.now + deadline
        self.free.pop(address, None)
        self._drain_step(address)

    def _drain_step(self, address: str) -> None:
        worker = self.workers.get(address)
        if worker is None or worker.status != "draining":
            return
        late = worker.drain_deadline is not None and self.clock.now >= worker.drain_deadline
        if worker.running and not late:
            if worker.drain_deadline is not None:
                self.at(worker.drain_deadline, "drain", address)
            return
        if not self.retire(address, close=True, leaving={address}, forced=late):
            self.at(self.clock.now + 2.0, "drain", address)  # wait for a worker to take them

    # ------------------------------------------------------------------ the probe
    def demand(self) -> dict[str, Any]:
        """What :func:`hybrid.scheduler_probe.resource_demand` answers."""
        workers = self.workers.values()
        return {"demand": {GPU: len(self.queued[GPU]) + self.running_tasks[GPU],
                           "notGPU": 0},
                "unrestricted": len(self.queued[None]) + self.running_tasks[None],
                "busy": {w.name: len(w.running) for w in workers},
                "holds": {w.name: len(w.holds) for w in workers}}

    def fail_tasks(self, resources: Iterable[str | None]) -> int:
        failed = 0
        for kind in resources:
            kind = GPU if kind == GPU else None
            while self.queued[kind]:
                task = self.tasks[self.queued[kind].popleft()]
                task.state = "failed"
                failed += 1
        return failed

    # ------------------------------------------------------------------ results
    def recomputed(self) -> int:
        """Task runs beyond each task's first."""
        return sum(max(0, t.starts - 1) for t in self.tasks.values())

    def makespan(self) -> float | None:
        """From the first burst's arrival until the last burst's last task."""
        ends = [b.finished for b in self.bursts.values()]
        if not ends or any(e is None for e in ends):
            return None
        return max(ends) - min(b.arrives for b in self.bursts.values())

    def submitted(self, pool: str) -> int:
        return self.systems[pool].submitted
