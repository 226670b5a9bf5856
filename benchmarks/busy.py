"""B1-B4, a busy facility: hybrid and dask-jobqueue side by side on busy real pools, and
the batch-queue simulator at facility size.

Real pools (the CI pools' opt-in busy mechanisms, docs/ci-pools.md):

- ``busy: over-submission`` (B1): an adaptive cluster (``minimum=0, maximum=6``) gets a
  burst of tasks on a pool with two slots (Slurm partition ``busy``; HTCondor
  ``concurrency_limits = hybrid_ci_busy``): every job it ever submitted (the batch system's
  own records), over the six the burst needs.
- ``busy: walltime`` (B2, Slurm): a graph lasting at least three one-minute walltimes on
  two workers: task runs beyond the first (each task reports its runs to the scheduler).
  ``dask-jobqueue`` is ``SLURMCluster(walltime=...)`` as it ships; ``dask-jobqueue
  --lifetime`` adds the worker options its documentation advises for walltimes.
- ``busy: spill-over`` (B3): a burst on a preferred Slurm pool whose jobs wait (``--begin``),
  with a fast HTCondor pool capped at two workers to fall back to, against the same burst
  on the busy pool alone (hybrid and dask-jobqueue): the makespan.

Simulator (``busy-sim``, B4; :mod:`benchmarks.busy_scenarios`): the scenarios, and the
facility day of about 10,000 jobs: the time each of hybrid's decisions takes (CPU time of
this process: the machine is shared; and that CPU time less what the simulated batch
system and scheduler took to answer, hybrid's own), and the run's own time. The day runs
``FACILITY_RUNS`` times (once with ``--quick``): each decision is also counted at the least
it took over the runs, the reading B4's goal uses.
"""

from __future__ import annotations

import os
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import dask
from distributed import Client

from benchmarks import busy_scenarios, realpools
from benchmarks.harness import Goal, Results, fmt, log, repeat, rotated


def _tasks():
    """Task functions built in a function: cloudpickle ships them by value."""

    def work(x: int, seconds: float) -> int:
        import time

        from distributed import get_worker

        worker = get_worker()
        worker.log_event("bench-runs", {"key": str(worker.get_current_task())})
        time.sleep(seconds)
        return x

    return work


WORK = _tasks()


def _recomputed(client: Client) -> int:
    """Task runs beyond each task's first (a killed worker's last reports may be lost with
    it: a lower bound when workers die)."""
    runs: dict[str, int] = {}
    for _, message in client.get_events("bench-runs"):
        runs[message["key"]] = runs.get(message["key"], 0) + 1
    return sum(n - 1 for n in runs.values())


# --------------------------------------------------------------------------- hybrid
def _hybrid(setup: Any, staging: Path, job: Any) -> dict[str, float]:
    from hybrid import HybridCluster

    name = f"busy-{uuid.uuid4().hex[:8]}"
    settings = {"hybrid.batch.staging-directory": str(staging),
                "hybrid.scheduler.host": "127.0.0.1", "hybrid.batch.poll-interval": "1s"}
    with dask.config.set(settings), HybridCluster(name=name, dashboard_address=None) as cluster:
        setup(cluster)
        with Client(cluster.scheduler_address, security=cluster.security,
                    set_as_default=False) as client:
            result = job(client)
        # what the pools submitted (Slurm lists a cancelled pending array rest as one job)
        result["jobs"] = sum(p.submitted for p in cluster.pools.values())
    return result


def _slurm_jobs(*, name: str) -> int:
    """dask-jobqueue's jobs of this name Slurm still lists (one job per worker)."""
    import subprocess

    out = subprocess.run(["squeue", "--noheader", "--array", "--states=all",
                          "--format=%i|%j|%k"], capture_output=True, text=True,
                         timeout=60).stdout
    ids = set()
    for line in out.splitlines():
        parts = line.split("|", 2)
        if len(parts) == 3 and parts[1] == name:
            ids.add(parts[0])
    return len(ids)


# --------------------------------------------------------------------------- dask-jobqueue
def _jobqueue(system: str, staging: Path, job: Any, *, queue: str | None = None,
              extra: list[str] | None = None, directives: Any = None, walltime: str = "00:30",
              worker_args: list[str] | None = None, adapt: tuple[int, int] | None = None,
              scale: int | None = None) -> dict[str, float]:
    marker = f"bench{uuid.uuid4().hex[:8]}"
    common = {"cores": 1, "memory": "512MiB", "python": sys.executable,
              "scheduler_options": {"host": "127.0.0.1", "dashboard_address": None},
              "local_directory": str(staging), "worker_extra_args": worker_args or []}
    if system == "htcondor":
        from dask_jobqueue import HTCondorCluster

        with realpools.condor_tools():
            cluster = HTCondorCluster(disk="512MiB", job_extra_directives={
                "My.BenchMarker": f'"{marker}"', **(directives or {})}, **common)
            try:
                return _drive(cluster, job, adapt, scale, lambda: _condor_marker(marker))
            finally:
                realpools.condor_remove(f'BenchMarker == "{marker}"')
    from dask_jobqueue import SLURMCluster

    cluster = SLURMCluster(queue=queue or os.environ.get("HYBRID_CI_SLURM_PARTITION", "debug"),
                           walltime=walltime if walltime.count(":") == 2 else walltime + ":00",
                           job_name=marker, job_extra_directives=[
                               "--output=/dev/null", *(extra or [])], **common)
    try:
        return _drive(cluster, job, adapt, scale, lambda: _slurm_jobs(name=marker))
    finally:
        realpools.slurm_cancel(name=marker)


def _condor_marker(marker: str) -> int:
    import htcondor2

    schedd = htcondor2.Schedd()
    constraint = f'BenchMarker == "{marker}"'
    ids = {(a["ClusterId"], a["ProcId"]) for a in schedd.query(
        constraint=constraint, projection=["ClusterId", "ProcId"])}
    ids |= {(a["ClusterId"], a["ProcId"]) for a in schedd.history(
        constraint=constraint, projection=["ClusterId", "ProcId"], match=10000)}
    return len(ids)


def _drive(cluster: Any, job: Any, adapt: tuple[int, int] | None, scale: int | None,
           jobs: Any) -> dict[str, float]:
    try:
        if adapt is not None:
            cluster.adapt(minimum=adapt[0], maximum=adapt[1])
        if scale is not None:
            cluster.scale(scale)
        with Client(cluster.scheduler_address, set_as_default=False) as client:
            result = job(client)
    finally:
        cluster.close()
    result["jobs"] = jobs()
    return result


# --------------------------------------------------------------------------- B1
def over_submission(results: Results, systems: list[str], repeats: int, quick: bool,
                    staging: Path) -> None:
    maximum, tasks, seconds = 6, (18 if quick else 36), 2.0

    def burst(client: Client) -> dict[str, float]:
        start = time.perf_counter()
        assert sum(client.gather(client.map(WORK, range(tasks), [seconds] * tasks,
                                            pure=False))) == sum(range(tasks))
        return {"makespan": time.perf_counter() - start}

    for system in systems:
        config = f"{tasks} tasks, maximum {maximum}, 2 slots"
        busy = ({"queue": os.environ.get("HYBRID_CI_SLURM_BUSY_PARTITION", "busy")}
                if system == "slurm" else
                {"job_extra_directives": ["concurrency_limits = hybrid_ci_busy"]})

        def ours(system: str = system, busy: dict = busy) -> dict[str, float]:
            def setup(cluster: Any) -> None:
                cluster.add_pool("w", system, cores=1, memory="512 MiB", walltime="00:30",
                                 nanny=False, **busy)
                cluster.adapt(pool="w", minimum=0, maximum=maximum, interval="1s")
            found = _hybrid(setup, staging, burst)
            return {"value": found["jobs"] / maximum, **found}

        def theirs(system: str = system, busy: dict = busy) -> dict[str, float]:
            options = ({"queue": busy["queue"]} if system == "slurm" else
                       {"directives": {"concurrency_limits": "hybrid_ci_busy"}})
            found = _jobqueue(system, staging, burst, adapt=(0, maximum), **options)
            return {"value": found["jobs"] / maximum, **found}

        variants = [("hybrid", ours), ("dask-jobqueue", theirs)]
        for turn in range(repeats):
            for variant, function in rotated(variants, turn):
                repeat(results.measure("busy: over-submission", system, config, variant,
                                       unit="jobs/needed"), function)


# --------------------------------------------------------------------------- B2
#: How long the walltime benchmark's graph may take (hybrid's takes about 4 minutes).
GRAPH_LIMIT = 600


def walltime(results: Results, repeats: int, quick: bool, staging: Path) -> None:
    seconds = 4.0
    tasks = 20 if quick else 100  # two workers: 40 s (quick) or 200 s (> 3 walltimes)
    config = f"{tasks} tasks of {seconds:g} s, 2 workers, walltime 1 min"

    def graph(client: Client) -> dict[str, float]:
        client.wait_for_workers(2, timeout=180)
        start = time.perf_counter()
        futures = client.map(WORK, range(tasks), [seconds] * tasks, pure=False)
        total = client.submit(sum, futures)
        # a graph that keeps losing its results may never finish: its recomputations so far
        try:
            assert total.result(timeout=GRAPH_LIMIT) == sum(range(tasks))
            done = True
        except TimeoutError:
            done = False
        lasted = time.perf_counter() - start
        return {"value": _recomputed(client), "lasted": lasted,
                "finished": float(done)}

    def ours() -> dict[str, float]:
        def setup(cluster: Any) -> None:
            cluster.add_pool("w", "slurm", cores=1, memory="512 MiB", walltime="00:01",
                             nanny=False)
            cluster.scale(2)
        return _hybrid(setup, staging, graph)

    def theirs(lifetime: bool) -> dict[str, float]:
        args = ["--lifetime", "40s", "--lifetime-stagger", "5s"] if lifetime else []
        return _jobqueue("slurm", staging, graph, walltime="00:01:00", worker_args=args,
                         scale=2)

    variants = [("hybrid", ours), ("dask-jobqueue", lambda: theirs(False))]
    if not quick:
        variants.append(("dask-jobqueue --lifetime", lambda: theirs(True)))
    for turn in range(repeats):
        for variant, function in rotated(variants, turn):
            repeat(results.measure("busy: walltime", "slurm", config, variant,
                                   unit="tasks recomputed"), function)


# --------------------------------------------------------------------------- B3
def spill_over(results: Results, repeats: int, quick: bool, staging: Path) -> None:
    # quick: the Slurm jobs still wait twice the fallback time (10 s), so the fast pool takes
    # work first and shrinks back when they start
    wait, tasks, seconds = (20, 16, 3.0) if quick else (120, 40, 3.0)
    config = f"{tasks} tasks of {seconds:g} s; Slurm jobs wait {wait} s, max 4; HTCondor max 2"
    begin = f"--begin=now+{wait}"

    def burst(client: Client) -> dict[str, float]:
        start = time.perf_counter()
        assert sum(client.gather(client.map(WORK, range(tasks), [seconds] * tasks,
                                            pure=False))) == sum(range(tasks))
        return {"value": time.perf_counter() - start}

    def ours(fallback: bool) -> dict[str, float]:
        def setup(cluster: Any) -> None:
            cluster.add_pool("batch", "slurm", cores=1, memory="512 MiB", walltime="00:30",
                             nanny=False, job_extra_directives=[begin])
            cluster.adapt(pool="batch", minimum=0, maximum=4, interval="1s")
            if fallback:
                cluster.add_pool("fast", "htcondor", cores=1, memory="512 MiB", nanny=False)
                cluster.adapt(pool="fast", minimum=0, maximum=2, interval="1s")
                cluster.prefer(["batch", "fast"], fallback_after="10s")
        return _hybrid(setup, staging, burst)

    variants = [("hybrid: busy pool alone", lambda: ours(False)),
                ("hybrid: busy + fast pool", lambda: ours(True)),
                ("dask-jobqueue: busy pool alone",
                 lambda: _jobqueue("slurm", staging, burst, extra=[begin], adapt=(0, 4)))]
    for turn in range(repeats):
        for variant, function in rotated(variants, turn):
            repeat(results.measure("busy: spill-over", "slurm+htcondor", config, variant),
                   function)


# --------------------------------------------------------------------------- B4
#: How many times the facility day runs (the B4 goal reads each decision's least time).
FACILITY_RUNS = 3
LEAST = "decision CPU time, hybrid's own, each decision's least"
def simulator(results: Results, quick: bool) -> None:
    scale = 0.1 if quick else 1.0
    system = "simulated"

    def record(config: str, variant: str, unit: str, value: Any, **extra: Any) -> None:
        measure = results.measure("busy-sim", system, config, variant, unit=unit)
        measure.samples.append(float("nan") if value is None else float(value))
        for key, item in extra.items():
            measure.extra.setdefault(key, []).append(float(item))
        log(f"busy-sim {config} {variant}: {fmt(value)} {unit}")

    for policy in ("hybrid", "dask-jobqueue model"):
        found = busy_scenarios.over_submission(policy, scale=scale)
        record(f"over-submission, maximum {found['maximum']}", policy, "jobs/needed",
               found["ratio"], submit_calls=found["submit_calls"],
               most_queued=found["most_queued"])
    for policy in ("hybrid", "hybrid, no lifetime", "dask-jobqueue model"):
        found = busy_scenarios.walltime(policy, scale=scale)
        record("8 h of work, walltime 1 h", policy, "tasks recomputed", found["recomputed"],
               walltime_kills=found["walltime_kills"], jobs=found["jobs"])
    for requeue in (True, False):
        found = busy_scenarios.evictions(requeue, scale=scale)
        record("evictions, 1 per job-hour", "requeued" if requeue else "preempted",
               "seen/evicted", found["seen"] / max(1, found["evictions"]),
               failures=found["failures"], evictions=found["evictions"])
    for fallback in (False, True):
        found = busy_scenarios.fallback(fallback, scale=scale)
        record("burst on a slow pool", "busy + fast pool" if fallback else
               "busy pool alone", "s", found["makespan_s"])
    # the same deterministic day FACILITY_RUNS times: each run's numbers are one sample,
    # and each decision's least time over the runs is its cost free of the machine's noise
    days = [busy_scenarios.facility(scale=scale) for _ in range(1 if quick else FACILITY_RUNS)]
    config = f"facility day, {days[0]['jobs']} jobs"
    for found in days:
        for key, label in (("decisions_own_cpu", "decision CPU time, hybrid's own"),
                           ("decisions_cpu", "decision CPU time"),
                           ("decisions", "decision wall time")):
            stats = found[key]
            record(config, f"{label}: median", "ms", stats["median_ms"],
                   count=stats["count"])
            record(config, f"{label}: p99", "ms", stats["p99_ms"])
            record(config, f"{label}: max", "ms", stats["max_ms"])
        stats = found["collections_in_decisions"]  # (left out of hybrid's own time)
        record(config, "full garbage collections in decisions: max", "ms",
               stats["max_ms"] if stats["count"] else 0.0, count=stats["count"])
        record(config, "run: wall time", "s", found["wall_s"])
        record(config, "recomputed (evictions)", "tasks", found["recomputed"],
               seen=found["seen"], evictions=found["evictions"], failures=found["failures"])
    least = busy_scenarios.least_of_runs(days)
    for part in ("median", "p99", "max"):
        record(config, f"{LEAST} of {len(days)} run(s): {part}", "ms", least[f"{part}_ms"],
               count=least["count"])


# --------------------------------------------------------------------------- entry
#: The parts of ``busy``, in the order they run.
PARTS = ("over-submission", "walltime", "spill-over")


def run(results: Results, systems: list[str], repeats: int, quick: bool,
        parts: tuple[str, ...] = PARTS) -> None:
    """Every real-pool benchmark (of ``parts``) whose systems answer (the simulator is
    ``busy-sim``)."""
    import tempfile

    checks = {"htcondor": realpools.htcondor_problem, "slurm": realpools.slurm_problem}
    problems = {system: checks[system]() for system in systems if system in checks}
    anchor = realpools.jobqueue_problem()
    if anchor:
        results.skip("busy", anchor)
        return
    up = [s for s in systems if not problems.get(s)]
    for system in systems:
        if problems.get(system):
            results.skip("busy", f"{system}: {problems[system]}")
    with tempfile.TemporaryDirectory(prefix="hybrid-bench-busy-") as staging:
        path = Path(staging)
        if up and "over-submission" in parts:
            over_submission(results, up, repeats, quick, path)
        if "slurm" in up and "walltime" in parts:
            walltime(results, min(repeats, 3), quick, path)
        if "slurm" in up and "htcondor" in up and "spill-over" in parts:
            spill_over(results, min(repeats, 3), quick, path)


def goals(results: Results) -> list[Goal]:
    """B1-B4."""
    out = []
    for m in results.measures:
        if m.benchmark == "busy: over-submission" and m.variant == "hybrid":
            theirs = results.find(m.benchmark, m.system, m.config, "dask-jobqueue")
            median = m.median()
            out.append(Goal("B1", f"{m.system}: jobs ever submitted / jobs needed <= 1.1",
                            f"{fmt(median)} (dask-jobqueue {fmt(theirs and theirs.median())})",
                            None if median is None else median <= 1.1))
    for m in results.measures:
        if m.benchmark == "busy: walltime" and m.variant == "hybrid":
            lasted = min(m.extra.get("lasted", [0]) or [0])
            theirs = results.find(m.benchmark, m.system, m.config, "dask-jobqueue")
            long_enough = lasted >= 180
            unfinished = (sum(1 for f in theirs.extra.get("finished", []) if f == 0)
                          if theirs else 0)
            out.append(Goal(
                "B2", "tasks recomputed because a walltime ended = 0, graph >= 3 walltimes",
                f"{fmt(max(m.samples, default=None))} (dask-jobqueue "
                f"{fmt(theirs and theirs.median())}"
                + (f", {unfinished} run(s) unfinished after {GRAPH_LIMIT} s" if unfinished
                   else "") + f"); graph lasted {fmt(lasted)} s",
                (max(m.samples) == 0 if long_enough else None) if m.samples else None,
                "" if long_enough else "the graph lasted under 3 walltimes (quick): no verdict"))
    for m in results.measures:
        if m.benchmark == "busy: spill-over" and m.variant == "hybrid: busy + fast pool":
            alone = results.find(m.benchmark, m.system, m.config, "hybrid: busy pool alone")
            r = (m.median() / alone.median() if alone and alone.median() and m.median()
                 else None)
            out.append(Goal("B3", "spill-over makespan <= 0.7x the busy pool alone",
                            "-" if r is None else f"{r:.2f}x", None if r is None else r <= 0.7))
    facility = [m for m in results.measures if m.benchmark == "busy-sim"
                and m.config.startswith("facility")]
    if facility:
        jobs = int(facility[0].config.split()[2].replace(",", ""))
        p99 = next((m.median() for m in facility
                    if m.variant == "decision CPU time, hybrid's own: p99"), None)
        most = next((m.median() for m in facility
                     if m.variant == "decision CPU time, hybrid's own: max"), None)
        collections = next((m for m in facility if m.variant.startswith("full garbage")),
                           None)
        with_doubles = next((m.median() for m in facility
                             if m.variant == "decision CPU time: p99"), None)
        wall = next((m.median() for m in facility if m.variant == "run: wall time"), None)
        least = {m.variant.rsplit(": ", 1)[1]: m for m in facility
                 if m.variant.startswith(LEAST)}
        least_p99 = least["p99"].median() if "p99" in least else None
        least_max = least["max"].median() if "max" in least else None
        runs = next((m.variant.split(" of ", 1)[1].split(" ")[0] for m in least.values()), "?")
        raw_max = next((m for m in facility
                        if m.variant == "decision CPU time, hybrid's own: max"), None)
        sized = jobs >= 9_500
        out.append(Goal("B4", "simulator: 10,000 jobs in 8 simulated hours, every one of "
                        "hybrid's decisions < 5 ms (its CPU time, the simulated facility's "
                        "own answers and the interpreter's full collections left out, at "
                        "the least of runs of the same deterministic day), the run < 60 s",
                        f"{jobs} jobs, each decision at its least of {runs} run(s): max "
                        f"{fmt(least_max)} ms, p99 {fmt(least_p99)} ms; a single run's p99 "
                        f"{fmt(p99)} ms ({fmt(with_doubles)} ms with the simulated "
                        f"facility's answers), max {fmt(most)} ms"
                        + (f" [{fmt(min(raw_max.samples))}-{fmt(max(raw_max.samples))}]"
                           if raw_max and len(raw_max.samples) > 1 else "")
                        + (f" ({int(collections.extra['count'][0])} full collection(s) in "
                           f"decisions, up to {fmt(collections.median())} ms, left out)"
                           if collections and collections.extra.get("count") else "")
                        + f", run {fmt(wall)} s",
                        (least_max is not None and least_max < 5 and least_p99 is not None
                         and least_p99 < 5 and wall is not None and wall < 60)
                        if sized else None, "" if sized else "quick size: no verdict"))
    return out
