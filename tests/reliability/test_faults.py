"""Faults on the REAL HTCondor pool, the REAL Slurm and the REAL Grid Engine: nothing lost,
nothing left behind.

Every test ends with a correct result (or the batch system's own reason) and with ZERO jobs
of its cluster in the batch system, checked with the batch system itself (``condor_jobs`` and
``slurm_jobs`` of tests/batch/test_real_pools.py, ``sge_jobs`` of tests/batch/test_sge.py), not
with hybrid's bookkeeping. Waits have
deadlines; what a test measures, it asserts as a bound, and docs/reliability.md ("Faults")
lists those bounds. Counting reconcile periods (a wrapper around ``PoolManager.reconcile``
that counts its calls) replaces "sleep, then check nothing happened".
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import dask
import htcondor2
import pytest

from hybrid import HybridCluster
from hybrid.batch import JobState, JobStatus
from hybrid.errors import BatchError, PoolFailed, WorkersDidNotArrive
from hybrid.manager import EXIT_HINTS, PoolManager
from tests.batch.test_real_pools import condor_jobs, slurm_jobs, wait_for
from tests.batch.test_sge import sge_jobs
from tests.scheduler_workers import scheduler_workers

pytestmark = pytest.mark.timeout(300)

#: ``hybrid.batch.poll-interval`` in these tests: one reconcile period, in seconds.
POLL = 1.0
#: Seconds from the batch system no longer listing a lost job to its replacement submitted:
#: one reconcile period, plus one query and one submission on this loaded 2-core machine.
REFILL_BOUND = POLL + 3.0
#: The workers' death timeout in the kill tests, in seconds.
DEATH_TIMEOUT = 10
#: From a worker's scheduler gone to its job out of the queue: the death timeout, plus the
#: start of a job that was still queued, plus the batch system's bookkeeping.
LEAVE_BOUND = DEATH_TIMEOUT + 35.0
#: The lease of the HTCondor job in the kill test that never starts, in seconds.
LEASE = 10


def _build() -> tuple[Callable, Callable]:
    """Task functions, built in a function so cloudpickle ships them by value."""

    def slow_square(x: int) -> tuple[int, str]:
        """Half a second of work: the square and the worker that computed it."""
        import time

        from distributed import get_worker

        time.sleep(0.5)
        return x * x, str(get_worker().name)

    def increment(x: int) -> int:
        return x + 1

    return slow_square, increment


slow_square, increment = _build()


# --------------------------------------------------------------------------- the systems
def remove_condor(ids: list[str]) -> None:
    """``condor_rm`` from outside hybrid (the bindings' equivalent)."""
    htcondor2.Schedd().act(htcondor2.JobAction.Remove, ids, reason="test: removed by an admin")


def remove_slurm(ids: list[str]) -> None:
    """``scancel`` from outside hybrid."""
    subprocess.run(["scancel", *ids], check=True, capture_output=True, timeout=60)


def remove_sge(ids: list[str]) -> None:
    """``qdel`` from outside hybrid."""
    subprocess.run(["qdel", *ids], check=True, capture_output=True, timeout=60)


class RealSystem:
    """One real batch system as a test sees it from outside hybrid."""

    def __init__(self, name: str, live: Callable[[str], list[str]],
                 remove: Callable[[list[str]], None], tls: bool, never_starts: str,
                 held: str, held_reason: str):
        self.name = name
        #: Our active jobs of a cluster, as the batch system lists them.
        self.live = live
        self.remove = remove
        #: Whether the workers use TLS (their staging directory then holds key copies).
        self.tls = tls
        #: A directive that keeps a job queued, never started.
        self.never_starts = never_starts
        #: Pool options that get every job held, and the words of the system's reason.
        self.held = held
        self.held_reason = held_reason


SYSTEMS = {
    "htcondor": RealSystem(
        "htcondor", condor_jobs, remove_condor, tls=True, never_starts="requirements = False",
        # the worker exits at once and never writes this output file: HTCondor holds the job
        held="transfer_output_files = never-written.txt", held_reason="never-written.txt"),
    "slurm": RealSystem(
        "slurm", slurm_jobs, remove_slurm, tls=False, never_starts="--begin=now+1hour",
        held="--hold", held_reason="JobHeldUser"),
    "sge": RealSystem(
        "sge", sge_jobs, remove_sge, tls=True, never_starts="-a 209912312359",
        held="-h", held_reason=r"on hold \(hqw"),
}
FIXTURES = {"htcondor": "htcondor_pool", "slurm": "slurm_cluster", "sge": "sge_cell"}


#: One run per real system, each with its marker (so a contributor who is not root, who
#: cannot start the pools, has them left out).
REAL = [pytest.param("htcondor", marks=pytest.mark.htcondor),
        pytest.param("slurm", marks=pytest.mark.slurm),
        pytest.param("sge", marks=pytest.mark.sge)]


def bring_up(request) -> RealSystem:
    """The real batch system of this run, up (HTCondor and Grid Engine with TLS workers, Slurm
    without)."""
    request.getfixturevalue(FIXTURES[request.param])
    return SYSTEMS[request.param]


real_fixture = pytest.fixture(params=REAL, name="real")(bring_up)


@pytest.fixture
def fast_reconcile() -> Iterator[None]:
    """One reconcile period of :data:`POLL` seconds, three failures before giving up."""
    with dask.config.set({"hybrid.batch.poll-interval": f"{POLL}s",
                          "hybrid.batch.max-failures": 3}):
        yield


def name_of(label: str, real: RealSystem) -> str:
    """A cluster name of this test run."""
    return f"f{os.getpid()}{label}{real.name[:2]}"


class Reconciles:
    """Counts the pool manager's reconcile calls (one per pool per period)."""

    def __init__(self, manager: PoolManager):
        self.count = 0
        original = manager.reconcile

        async def counted(pool) -> None:
            try:
                await original(pool)
            finally:
                self.count += 1

        manager.reconcile = counted  # type: ignore[method-assign]

    def wait(self, periods: int, timeout: float = 60) -> None:
        """Until ``periods`` more reconciles have run."""
        goal = self.count + periods
        wait_for(lambda: self.count >= goal, timeout, f"{periods} more reconcile periods")


@contextlib.contextmanager
def reconciler_paused(cluster: HybridCluster) -> Iterator[None]:
    """No reconcile period runs inside: a test sees the effect of one call alone."""
    cluster.sync(cluster.manager.stop)
    try:
        yield
    finally:
        cluster.loop.add_callback(cluster.manager.start)


def measure(predicate: Callable[[], bool], timeout: float, what: str,
            since: float | None = None) -> float:
    """Seconds from ``since`` (default: now) until ``predicate`` holds (polled every 0.1 s),
    at most ``timeout``."""
    start = time.monotonic() if since is None else since
    while not predicate():
        assert time.monotonic() - start < timeout, f"no {what} within {timeout} s"
        time.sleep(0.1)
    return time.monotonic() - start


def staged(root: Path, cluster: str) -> list[Path]:
    """The cluster's staging directories under the staging root."""
    return sorted(root.glob(f"{cluster}-*")) if root.is_dir() else []


# --------------------------------------------------------------------------- the tests
def test_half_the_workers_removed_mid_computation_rerun_and_refill(
        real: RealSystem, fast_reconcile, staging: Path) -> None:
    with HybridCluster(name=name_of("half", real), security=real.tls) as cluster:
        pool = cluster.add_pool("cpu", real.name, cores=1, memory="512 MiB", walltime="00:15",
                                nanny=False)
        cluster.scale(4)
        cluster.wait_for_workers(4, timeout=150, progress=False)
        first = sorted(real.live(cluster.name))
        assert len(first) == 4
        with cluster.get_client() as client:
            futures = client.map(slow_square, range(40), pure=False)
            wait_for(lambda: sum(f.done() for f in futures) >= 4, 60, "the first results")
            victims = first[:2]
            names = {a: str(w["name"]) for a, w in scheduler_workers(client).items()}
            victim_workers = {n for n in names.values() if pool.job_id_of_worker(n) in victims}
            busy = {names[a] for a, keys in client.processing().items() if keys}
            assert victim_workers and victim_workers <= busy  # they had tasks when removed
            removed_at = time.monotonic()
            real.remove(victims)
            # when the batch system stops listing the removed jobs, and when hybrid has
            # submitted their replacements (it may be first: it polls as often as this does)
            gone_at = refilled_at = None
            while gone_at is None or refilled_at is None:
                now = time.monotonic()
                assert now - removed_at < 60, "no refill within 60 s"
                if gone_at is None and not set(victims) & set(real.live(cluster.name)):
                    gone_at = now
                if refilled_at is None and pool.submitted > 4:
                    refilled_at = now
                time.sleep(0.05)
            refill = refilled_at - gone_at
            assert refill <= REFILL_BOUND
            wait_for(lambda: len(set(real.live(cluster.name)) - set(first)) == 2, 60,
                     "the two replacements in the queue")
            results = client.gather(futures)
        # every task has its result, none from a removed worker: theirs were computed again
        assert [r for r, _ in results] == [x * x for x in range(40)]
        assert not {w for _, w in results} & victim_workers
        print(f"\n{real.name}: the removed jobs left the queue {gone_at - removed_at:.1f} s "
              f"after the removal, their replacements were submitted {refill:.1f} s later")
        cluster.wait_for_workers(4, timeout=150, progress=False)
        assert sorted(real.live(cluster.name)) == sorted(pool.active())
        # two replacements, no more: one call, or two when the batch system stopped listing
        # the removed jobs one poll apart (as Slurm did once in CI)
        assert pool.submitted == 6 and pool.failures == 0
    assert real.live(cluster.name) == []


def test_a_job_that_keeps_failing_is_not_resubmitted_in_a_loop(
        real: RealSystem, fast_reconcile, staging: Path) -> None:
    with HybridCluster(name=name_of("loop", real), security=real.tls) as cluster:
        reconciles = Reconciles(cluster.manager)
        pool = cluster.add_pool("cpu", real.name, python="/nonexistent/python",
                                walltime="00:05", nanny=False)
        with cluster.get_client() as client:
            future = client.submit(increment, 1)
            cluster.scale(2)
            # the pool gives up after max-failures; the task nothing else can run fails
            with pytest.raises(RuntimeError, match="gave up"):
                future.result(timeout=150)
        assert pool.failed is not None and "max-failures = 3" in pool.failed
        if real.name == "slurm":  # (it said only "NonZeroExitCode": squeue's raw status)
            assert "exit code 127" in pool.failed and EXIT_HINTS["127"] in pool.failed
        calls = pool.submit_calls
        assert 1 <= calls <= 3
        reconciles.wait(5)
        assert pool.submit_calls == calls  # no resubmission after giving up
        with pytest.raises(PoolFailed, match="gave up"):
            cluster.wait_for_workers(1, timeout=30, progress=False)
        print(f"\n{real.name}: gave up after {calls} submission(s): {pool.failed}")
        wait_for(lambda: real.live(cluster.name) == [], 60, "the failed jobs to leave")
    assert real.live(cluster.name) == []


@pytest.mark.parametrize("policy", ["report", "replace"])
def test_held_jobs_are_reported_or_replaced_never_in_a_loop(
        real: RealSystem, policy: str, fast_reconcile, staging: Path) -> None:
    with dask.config.set({"hybrid.batch.held-jobs": policy}), HybridCluster(
            name=name_of(f"held{policy[:3]}", real), security=real.tls) as cluster:
        reconciles = Reconciles(cluster.manager)
        pool = cluster.add_pool("cpu", real.name, python="/bin/true", walltime="00:05",
                                nanny=False, job_extra_directives=[real.held])
        cluster.scale(2)
        started = time.monotonic()
        if policy == "report":
            with pytest.raises(WorkersDidNotArrive, match=real.held_reason) as caught:
                cluster.wait_for_workers(2, timeout=120, progress=False)
            # the first held job already makes 2 workers impossible: whether the other is
            # held yet depends on the batch system's pace
            assert re.search(r"\b[12] job\(s\) are held", str(caught.value))
            reported = time.monotonic() - started
            reconciles.wait(5)
            assert pool.submit_calls == 1 and pool.failed is None  # waits for a person
            assert sorted(real.live(cluster.name)) == sorted(pool.active())
        else:
            with pytest.raises(PoolFailed, match=real.held_reason):
                cluster.wait_for_workers(2, timeout=120, progress=False)
            reported = time.monotonic() - started
            assert "max-failures = 3" in str(pool.failed)
            calls = pool.submit_calls
            # 2 held, replaced, held again: the 3rd failure gives up. The system may hold
            # the 2 jobs of a submission at different reconciles, so each replacement can
            # be a submission of its own: 2 or 3 submissions, at most 2 replacements
            assert calls in (2, 3) and pool.submitted <= 4, (calls, pool.submitted)
            reconciles.wait(5)
            assert pool.submit_calls == calls
            wait_for(lambda: real.live(cluster.name) == [], 60, "the held jobs to be removed")
        print(f"\n{real.name} {policy}: held jobs reported after {reported:.1f} s")
    assert real.live(cluster.name) == []


class ScriptedQueue:
    """A test double of a batch system's queue, not a batch system: the states a test sets
    are what ``query`` reports, and ``remove`` takes the jobs out."""

    name = "scripted queue"

    def __init__(self, states: dict[str, JobState]):
        self.states = dict(states)
        self.removed: list[str] = []

    def prepare(self, job, staging) -> None:
        """No job files to render."""

    def query(self, cluster=None, job_ids=None, history=False) -> list[JobStatus]:
        return [JobStatus(j, s, f"{s.value} for a test", "heldlate", "cpu")
                for j, s in self.states.items() if job_ids is None or j in job_ids]

    def remove(self, job_ids) -> None:
        for job_id in job_ids:
            self.removed.append(job_id)
            self.states.pop(job_id, None)

    def log_path(self, staging, job_id) -> None:
        """No job log to read."""


def test_a_job_held_after_its_pool_gave_up_is_removed_too() -> None:
    """Replace policy: the reconcile that gives up removes the jobs held then; one held at a
    later reconcile (the batch system holds jobs at its own pace) is removed too, with no
    failure counted and nothing submitted (found as a job left held in CI's HTCondor)."""
    from hybrid.pools import PoolSpec
    from hybrid.worker import Connection

    queue = ScriptedQueue({"1": JobState.held, "2": JobState.running})
    manager = PoolManager("heldlate", Connection("tcp://127.0.0.1:9"), scheduler=None)
    now = [1000.0]
    manager.clock = lambda: now[0]  # (the reconcile asks at its pace: time passes below)
    try:
        pool = manager.add(PoolSpec.build("cpu", "local"), system=queue)  # type: ignore[arg-type]
        pool.track(queue.query())
        pool.target = 2

        async def reconcile_twice() -> None:
            with dask.config.set({"hybrid.batch.held-jobs": "replace",
                                  "hybrid.batch.max-failures": 1}):
                await manager.reconcile(pool)
                assert pool.failed and queue.removed == ["1"]
                queue.states["2"] = JobState.held
                now[0] += 2.0  # the next reconcile, a poll interval later
                await manager.reconcile(pool)

        asyncio.run(reconcile_twice())
        assert queue.removed == ["1", "2"]
        assert pool.failures == 1 and pool.submit_calls == 0
    finally:
        manager.shutdown_executor()


def test_a_pool_that_gives_up_removes_its_pending_jobs_and_keeps_its_running_ones(
        caplog) -> None:
    """A pool that gave up (its jobs keep failing) removes the jobs still pending in the
    queue: each would start one more worker of the same kind, or hold an allocation for
    nothing, until the cluster closes. Running jobs stay (their workers serve), and a job
    that waits again later (evicted) is removed at the next reconcile; nothing is
    submitted."""
    from hybrid.pools import PoolSpec
    from hybrid.worker import Connection

    queue = ScriptedQueue({"1": JobState.failed, "2": JobState.pending,
                           "3": JobState.running, "4": JobState.pending})
    manager = PoolManager("heldlate", Connection("tcp://127.0.0.1:9"), scheduler=None)
    now = [1000.0]
    manager.clock = lambda: now[0]  # (the reconcile asks at its pace: time passes below)
    try:
        pool = manager.add(PoolSpec.build("cpu", "local"), system=queue)  # type: ignore[arg-type]
        pool.track(JobStatus(j, JobState.pending, None, "heldlate", "cpu")
                   for j in queue.states)
        pool.target = 4

        async def give_up_then_reconcile() -> None:
            with dask.config.set({"hybrid.batch.max-failures": 1}):
                await manager.reconcile(pool)  # job 1 failed: the pool gives up
                assert pool.failed and "job 1" in pool.failed
                await pool.giving_up
                assert sorted(queue.removed) == ["2", "4"]
                assert set(pool.active()) == {"3"}
                queue.states["3"] = JobState.pending  # evicted: waits again
                now[0] += 2.0  # the next reconcile, a poll interval later
                await manager.reconcile(pool)

        with caplog.at_level(logging.WARNING, logger="hybrid"):
            asyncio.run(give_up_then_reconcile())
        assert sorted(queue.removed) == ["2", "3", "4"]
        assert pool.submit_calls == 0 and pool.active() == []
        said = [r.getMessage() for r in caplog.records if "gave up: removing" in r.getMessage()]
        assert said == ["pool cpu gave up: removing its 2 pending job(s): 2 4",
                        "pool cpu gave up: removing its 1 pending job(s): 3"], said
    finally:
        manager.shutdown_executor()


SBATCH_WRAPPER = """#!/bin/bash
# sbatch, except for its second call: refused, or submitted with its answer lost
calls=$(( $(cat "{counter}" 2>/dev/null || echo 0) + 1 ))
echo "$calls" > "{counter}"
if [[ $calls == 2 ]]; then
    if [[ "{mode}" == answer-lost ]]; then
        "{sbatch}" "$@" >/dev/null
    fi
    echo "sbatch: error: Batch job submission failed: Socket timed out on send/recv" >&2
    exit 1
fi
exec "{sbatch}" "$@"
"""


@pytest.mark.slurm
@pytest.mark.parametrize("mode", ["refused", "answer-lost"])
def test_sbatch_failing_mid_scale_leaves_nothing_untracked(
        slurm_cluster, mode: str, fast_reconcile, staging: Path, tmp_path: Path,
        monkeypatch) -> None:
    wrappers = tmp_path / "bin"
    wrappers.mkdir()
    wrapper = wrappers / "sbatch"
    wrapper.write_text(SBATCH_WRAPPER.format(counter=tmp_path / "calls", mode=mode,
                                             sbatch=shutil.which("sbatch")))
    wrapper.chmod(0o755)
    monkeypatch.setenv("PATH", f"{wrappers}:{os.environ['PATH']}")
    with HybridCluster(name=f"f{os.getpid()}sb{mode[:3]}") as cluster:
        pool = cluster.add_pool("cpu", "slurm", walltime="00:05", nanny=False,
                                system_options={"max_array_size": 2})
        with reconciler_paused(cluster):
            # 5 workers are 3 arrays of at most 2: the second sbatch fails
            with pytest.raises(BatchError, match="Socket timed out"):
                cluster.scale(5)
            # with the reconciler paused (nothing of hybrid's runs after scale() raised):
            # the jobs it cancelled leave the queue (one that had started may show
            # COMPLETING for a moment on a busy machine; one not cancelled stays until
            # its 5-minute walltime), nothing tracked, no staged file
            wait_for(lambda: slurm_jobs(cluster.name) == [], 30,
                     "the jobs of the failed scale() to leave the queue")
            assert pool.jobs == {} and pool.failures == 1
            assert staged(staging, cluster.name) == []
        # a failed scale() moves no target and is not retried (issue 23): reconcile periods
        # pass and submit nothing
        assert pool.target == 0
        calls, passes = pool.submit_calls, cluster.manager.passes
        wait_for(lambda: cluster.manager.passes >= passes + 2, 60, "two reconcile periods")
        assert pool.submit_calls == calls and slurm_jobs(cluster.name) == []
        # the user's next scale() (sbatch works again) submits them all, every job tracked
        cluster.scale(5)
        assert sorted(slurm_jobs(cluster.name)) == sorted(pool.active()) and len(
            pool.active()) == 5
        cluster.wait_for_workers(5, timeout=120, progress=False)
        assert pool.failures == 0
    assert slurm_jobs(cluster.name) == []


@pytest.mark.htcondor
@pytest.mark.parametrize("refusal", ["spool", "schedd"])
def test_htcondor_refusing_a_submission_leaves_nothing_untracked(
        htcondor_pool, refusal: str, fast_reconcile, staging: Path) -> None:
    with HybridCluster(name=f"f{os.getpid()}hc{refusal[:3]}", security=True) as cluster:
        if refusal == "spool":  # the cluster is made, then its files cannot be spooled
            extra, count, words = ["input = /nonexistent/input"], 2, "could not receive"
        else:  # one job more than the schedd takes in one transaction: it aborts the rest
            schedd = htcondor2.Collector().locate(htcondor2.DaemonType.Schedd)
            limit = int(htcondor2.RemoteParam(schedd).get("MAX_JOBS_PER_SUBMISSION", 20000))
            extra, count, words = ["requirements = False"], limit + 1, "submit failed"
        pool = cluster.add_pool("cpu", "htcondor", nanny=False, job_extra_directives=extra)
        with reconciler_paused(cluster):
            with pytest.raises(BatchError, match=words):
                cluster.scale(count)
            assert condor_jobs(cluster.name) == []
            assert pool.jobs == {} and pool.failures == 1
            assert staged(staging, cluster.name) == []  # no copy of the TLS key stays
        # a failed scale() moves no target and is not retried (issue 23)
        assert pool.target == 0
        passes = cluster.manager.passes
        wait_for(lambda: cluster.manager.passes >= passes + 2, 60, "two reconcile periods")
        assert pool.failures == 1 and pool.submit_calls == 0
        assert condor_jobs(cluster.name) == [] and staged(staging, cluster.name) == []
    assert condor_jobs(cluster.name) == []


CLIENT = """
import json, os, sys, time
from hybrid import HybridCluster

args = json.loads(sys.argv[1])
cluster = HybridCluster(name=args["name"], security=args["tls"])
for pool, options in args["pools"].items():
    cluster.add_pool(pool, args["system"], **options)
cluster.scale(2, pool="run")
cluster.scale(1, pool="hung")
cluster.wait_for_workers(2, pool="run", timeout=150, progress=False)
deadline = time.monotonic() + 120
while not any(job.state.value == "running" for job in cluster.jobs(pool="hung")):
    assert time.monotonic() < deadline, "the hung job did not start"
    time.sleep(0.2)
for pool in args["pools"]:
    if pool not in ("run", "hung"):
        cluster.scale(1, pool=pool)
jobs = {name: list(pool.jobs) for name, pool in cluster.pools.items()}
with open(args["ready"] + ".tmp", "w") as f:
    json.dump(jobs, f)
os.rename(args["ready"] + ".tmp", args["ready"])
time.sleep(3600)
"""


def test_client_killed_workers_exit_jobs_leave_and_gc_removes_the_rest(
        real: RealSystem, staging: Path, tmp_path: Path) -> None:
    """SIGKILL a process that runs a HybridCluster: nothing of it may stay for long."""
    name = name_of("kill", real)
    short = {"death_timeout": DEATH_TIMEOUT, "walltime": "00:10", "nanny": False}
    pools = {
        "run": short,  # its workers are connected when the client dies
        "late": short,  # scaled the moment before the kill: its worker never connects
        "hung": {**short, "python": sys.executable,  # running, but hangs before its worker
                 "job_script_prologue": ["sleep 600"]},
        "wait": {**short, "job_extra_directives": [real.never_starts]},  # never starts
    }
    if real.name == "htcondor":  # HTCondor removes a job older than its lease by itself
        # (no walltime: none may be longer than a lease given for the pool)
        pools["lease"] = {**pools["wait"], "lease": LEASE, "walltime": None}
    ready = tmp_path / "ready.json"
    env = {**os.environ, "DASK_HYBRID__BATCH__STAGING_DIRECTORY": str(staging),
           "DASK_HYBRID__SCHEDULER__HOST": "127.0.0.1",
           "DASK_HYBRID__BATCH__POLL_INTERVAL": f"{POLL}s"}
    with open(tmp_path / "client.log", "wb") as log:
        client = subprocess.Popen(
            [sys.executable, "-c", CLIENT, json.dumps({
                "name": name, "tls": real.tls, "system": real.name, "pools": pools,
                "ready": str(ready)})], env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_for(lambda: ready.exists() or client.poll() is not None, 200, "the client")
        assert ready.exists(), (tmp_path / "client.log").read_text()[-3000:]
        jobs = json.loads(ready.read_text())
        # the queue as the client dies (listed before the kill: a connected worker exits as
        # soon as its scheduler is gone, and its job may leave before a listing after it)
        listed = sorted(real.live(name))
    finally:
        client.send_signal(signal.SIGKILL)
        client.wait(30)
    killed = time.monotonic()
    assert listed == sorted(j for ids in jobs.values() for j in ids)

    def gone(pool: str) -> Callable[[], bool]:
        return lambda: not set(jobs[pool]) & set(real.live(name))

    connected = measure(gone("run"), LEAVE_BOUND, "the connected workers' jobs to leave",
                        since=killed)
    late = measure(gone("late"), LEAVE_BOUND, "the late worker's job to leave", since=killed)
    print(f"\n{real.name}: after the kill, connected workers' jobs left the queue in "
          f"{connected:.1f} s, a worker that never connected in {late:.1f} s")
    if "lease" in jobs:
        # the schedd evaluates periodic_remove every PERIODIC_EXPR_INTERVAL seconds
        schedd = htcondor2.Collector().locate(htcondor2.DaemonType.Schedd)
        period = int(htcondor2.RemoteParam(schedd).get("PERIODIC_EXPR_INTERVAL", 60))
        leased = measure(gone("lease"), LEASE + period + 10, "the leased job to leave",
                         since=killed)
        print(f"{real.name}: the job past its lease ({LEASE} s; periodic expressions every "
              f"{period} s) left {leased:.1f} s after the kill")
    # what only gc removes: a job that never starts, and one that hangs
    assert sorted(real.live(name)) == sorted(jobs["wait"] + jobs["hung"])
    directories = staged(staging, name)
    assert len(directories) == len(pools)
    if real.tls:
        assert all((d / "key.pem").exists() for d in directories)

    gc = subprocess.run([sys.executable, "-m", "hybrid.cli", "gc", "--system", real.name,
                         "--json"], env=env, capture_output=True, text=True, timeout=120)
    assert gc.returncode == 0, gc.stderr
    collected = json.loads(gc.stdout)
    assert sorted(j["job_id"] for j in collected["orphans"] if j["cluster"] == name) \
        == sorted(jobs["wait"] + jobs["hung"])
    # one gc removes the jobs AND every staging directory of the cluster, TLS copies too
    assert staged(staging, name) == []
    assert sorted(p for p in collected["staging"] if Path(p).name.startswith(f"{name}-")) \
        == sorted(map(str, directories))
    assert not list(staging.rglob("*.pem"))
    wait_for(lambda: real.live(name) == [], 60, "gc's removals to leave the queue")


SCHEDULER = [sys.executable, "-m", "distributed.cli.dask_scheduler", "--host", "127.0.0.1",
             "--port", "0", "--dashboard-address", "127.0.0.1:0"]


def test_scheduler_killed_workers_exit_and_jobs_leave(
        real: RealSystem, fast_reconcile, staging: Path, tmp_path: Path, caplog) -> None:
    address_file = tmp_path / "scheduler.json"
    with open(tmp_path / "scheduler.log", "wb") as log:
        scheduler = subprocess.Popen([*SCHEDULER, "--scheduler-file", str(address_file)],
                                     stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_for(address_file.exists, 60, "the scheduler to start")
        wait_for(lambda: "address" in address_file.read_text(), 10, "its address")
        address = json.loads(address_file.read_text())["address"]
        with HybridCluster(address, name=name_of("sched", real)) as cluster:
            pool = cluster.add_pool("cpu", real.name, death_timeout=DEATH_TIMEOUT,
                                    walltime="00:10", nanny=False)
            cluster.scale(2)
            cluster.wait_for_workers(2, timeout=150, progress=False)
            with cluster.get_client() as client:
                assert client.gather(client.map(increment, range(10))) == list(range(1, 11))
            jobs = sorted(real.live(cluster.name))
            assert len(jobs) == 2
            scheduler.send_signal(signal.SIGKILL)
            scheduler.wait(30)
            left = measure(lambda: real.live(cluster.name) == [], LEAVE_BOUND,
                           "the jobs to leave the queue by themselves")
            print(f"\n{real.name}: jobs left {left:.1f} s after the scheduler was killed")
            # the next period sees the jobs gone and the scheduler silent: no replacement
            wait_for(lambda: any("scheduler does not answer" in r.getMessage()
                                 for r in caplog.records), 30, "the refill to be declined")
            assert pool.submit_calls == 1 and real.live(cluster.name) == []
    finally:
        if scheduler.poll() is None:
            scheduler.send_signal(signal.SIGKILL)
            scheduler.wait(30)
    assert real.live(cluster.name) == []
