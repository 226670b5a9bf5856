"""P1, P3, P7: ``scale(n)`` -> ``client.wait_for_workers(n)``, then ``close()``, per system.

Four variants, interleaved in every repetition (their order rotates):

- ``hybrid``: a :class:`hybrid.HybridCluster` with one pool on the system, its defaults
  (TLS with client certificates, a temporary CA made for each cluster).
- ``hybrid (plain TCP)``: the same with ``security=False``: what TLS costs.
- ``dask-jobqueue``: ``HTCondorCluster`` / ``SLURMCluster`` / ``SGECluster`` with theirs (nanny
  included).
- ``floor``: what no launcher can beat on this pool: the pool's own time to start n trivial
  jobs (submitted in one transaction; each writes a time stamp when it starts) plus the time
  n bare workers (``python -m distributed.cli.dask_worker ADDRESS --no-nanny``) started
  directly on this machine take to connect.

Every worker has one thread and 1 GiB. Beside each scale-up time the launchers' rows record
``close`` (how long ``close()`` took) and ``gone`` (from ``close()`` returning until none of
the cluster's jobs is in the queue any more, asked of the batch system itself).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import dask
from distributed import Client

from benchmarks import realpools
from benchmarks.harness import Results, log, repeat, rotated

#: How long one repetition may wait for its workers.
WAIT = 180
#: The packaged tag of hybrid's jobs (``hybrid.batch.tag``).
TAG = "HybridCluster"


def wait_until(predicate: Callable[[], bool], timeout: float, what: str,
               pause: float = 0.02) -> float:
    """Poll ``predicate`` until it holds; the time.perf_counter() when it did."""
    deadline = time.monotonic() + timeout
    while True:
        if predicate():
            return time.perf_counter()
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} after {timeout:g} s")
        time.sleep(pause)


# --------------------------------------------------------------------------- hybrid
def hybrid_once(system: str, n: int, staging: Path, tls: bool = True) -> dict[str, float]:
    """One repetition with hybrid: scale-up, close, queue empty (``tls=False``: plain TCP;
    the cluster's start, with its certificate, is not timed either way)."""
    from hybrid import HybridCluster

    name = f"bench-{uuid.uuid4().hex[:8]}"
    settings = {"hybrid.batch.staging-directory": str(staging),
                "hybrid.scheduler.host": "127.0.0.1"}
    with dask.config.set(settings):
        cluster = HybridCluster(name=name, dashboard_address=None,
                                **({} if tls else {"security": False}))
        try:
            cluster.add_pool("w", system=system, cores=1, memory="1 GiB", walltime="00:30")
            with Client(cluster.scheduler_address, security=cluster.security,
                        set_as_default=False) as client:
                start = time.perf_counter()
                cluster.scale(n)
                client.wait_for_workers(n, timeout=WAIT)
                scaled = time.perf_counter() - start
        finally:
            closing = time.perf_counter()
            cluster.close()
            closed = time.perf_counter()
    gone = wait_until(lambda: _in_queue_hybrid(system, name) == 0, 120,
                      "hybrid's jobs still in the queue")
    return {"value": scaled, "close": closed - closing, "gone": gone - closed}


def _in_queue_hybrid(system: str, cluster: str) -> int:
    if system == "htcondor":
        return realpools.condor_in_queue(f'{TAG} == "{cluster}"')
    if system == "sge":
        return realpools.sge_in_queue(name_prefix=f"{TAG}-{cluster}-")
    return realpools.slurm_in_queue(comment_prefix=f"{TAG}:{cluster}:")


# --------------------------------------------------------------------------- dask-jobqueue
def jobqueue_once(system: str, n: int, staging: Path) -> dict[str, float]:
    """One repetition with dask-jobqueue's cluster for ``system``, its defaults."""
    marker = f"bench{uuid.uuid4().hex[:8]}"
    common = {"cores": 1, "memory": "1GiB", "python": sys.executable,
              "scheduler_options": {"host": "127.0.0.1", "dashboard_address": None},
              "local_directory": str(staging)}
    if system == "htcondor":
        from dask_jobqueue import HTCondorCluster

        def in_queue() -> int:
            return realpools.condor_in_queue(f'BenchMarker == "{marker}"')

        make = lambda: HTCondorCluster(  # noqa: E731
            disk="1GiB", job_extra_directives={"My.BenchMarker": f'"{marker}"'}, **common)
    elif system == "sge":
        from dask_jobqueue import SGECluster

        def in_queue() -> int:
            return realpools.sge_in_queue(name=marker)

        # the same request as hybrid's pool: one slot, mem_free=1 GiB, one output file
        make = lambda: SGECluster(  # noqa: E731
            queue=os.environ.get("HYBRID_CI_SGE_QUEUE", "hybrid.q"), walltime="00:30:00",
            job_name=marker, resource_spec="mem_free=1G",
            job_extra_directives=["-o /dev/null"], **common)
    else:
        from dask_jobqueue import SLURMCluster

        def in_queue() -> int:
            return realpools.slurm_in_queue(name=marker)

        make = lambda: SLURMCluster(  # noqa: E731
            queue=os.environ.get("HYBRID_CI_SLURM_PARTITION", "debug"), walltime="00:30:00",
            job_name=marker, job_extra_directives=["--output=/dev/null"], **common)
    cluster = make()
    try:
        with Client(cluster.scheduler_address, set_as_default=False) as client:
            start = time.perf_counter()
            cluster.scale(n)
            client.wait_for_workers(n, timeout=WAIT)
            scaled = time.perf_counter() - start
    finally:
        closing = time.perf_counter()
        cluster.close()
        closed = time.perf_counter()
    try:
        gone = wait_until(lambda: in_queue() == 0, 120, "dask-jobqueue's jobs still queued")
    finally:
        realpools.remove_named(system, marker)
    return {"value": scaled, "close": closed - closing, "gone": gone - closed}


# --------------------------------------------------------------------------- floor
def pool_start(system: str, n: int) -> float:
    """Seconds from one submission of n trivial jobs until the last of them started."""
    marker = f"bench{uuid.uuid4().hex[:8]}"
    if system == "htcondor":
        import htcondor2

        chroot = Path(os.environ["HYBRID_CONDOR_CHROOT"])
        stamps = Path(tempfile.mkdtemp(prefix="hybrid-bench-floor-", dir=chroot / "tmp"))
        inside = "/" + str(stamps.relative_to(chroot))
        stamps.chmod(0o1777)
        submit = htcondor2.Submit({
            "universe": "vanilla", "executable": "/bin/sh",
            "arguments": f"\"-c 'date +%s.%N > {inside}/$(ProcId)'\"",
            "initialdir": "/tmp", "should_transfer_files": "NO",
            "request_cpus": "1", "request_memory": "1024", "My.BenchMarker": f'"{marker}"',
            "leave_in_queue": "false"})
        try:
            start = time.time()
            htcondor2.Schedd().submit(submit, count=n)
            wait_until(lambda: len(list(stamps.iterdir())) >= n, WAIT,
                       "the floor's jobs did not all start", pause=0.05)
            return max(float(p.read_text() or "nan") for p in stamps.iterdir()) - start
        finally:
            realpools.condor_remove(f'BenchMarker == "{marker}"')
            subprocess.run(["rm", "-rf", str(stamps)], check=False)
    stamps = Path(tempfile.mkdtemp(prefix="hybrid-bench-floor-"))
    stamps.chmod(0o1777)
    if system == "sge":
        try:
            start = time.time()
            subprocess.run(
                ["qsub", "-terse", "-t", f"1-{n}", "-N", marker, "-o", "/dev/null", "-j", "y",
                 "-S", "/bin/bash", "-l", "h_rt=00:05:00,mem_free=1024M",
                 "-q", os.environ.get("HYBRID_CI_SGE_QUEUE", "hybrid.q")],
                input=f"date +%s.%N > {stamps}/$SGE_TASK_ID\n", check=True,
                capture_output=True, text=True, timeout=60, cwd=stamps)
            wait_until(lambda: len([p for p in stamps.iterdir() if p.stat().st_size]) >= n,
                       WAIT, "the floor's jobs did not all start", pause=0.05)
            return max(float(p.read_text()) for p in stamps.iterdir()) - start
        finally:
            realpools.sge_delete(marker)
            subprocess.run(["rm", "-rf", str(stamps)], check=False)
    try:
        start = time.time()
        subprocess.run(
            ["sbatch", f"--array=1-{n}", f"--job-name={marker}", "--output=/dev/null",
             "--cpus-per-task=1", "--mem=1024M", "--time=00:05:00",
             f"--partition={os.environ.get('HYBRID_CI_SLURM_PARTITION', 'debug')}",
             f"--wrap=date +%s.%N > {stamps}/$SLURM_ARRAY_TASK_ID"],
            check=True, capture_output=True, text=True, timeout=60)
        wait_until(lambda: len([p for p in stamps.iterdir() if p.stat().st_size]) >= n, WAIT,
                   "the floor's jobs did not all start", pause=0.05)
        return max(float(p.read_text()) for p in stamps.iterdir()) - start
    finally:
        realpools.slurm_cancel(name=marker)
        subprocess.run(["rm", "-rf", str(stamps)], check=False)


def bare_workers(n: int) -> float:
    """Seconds for n bare workers started on this machine to connect to a scheduler."""
    from distributed import LocalCluster

    with LocalCluster(n_workers=0, host="127.0.0.1", protocol="tcp://", processes=False,
                      dashboard_address=None) as scheduler_only, \
            Client(scheduler_only, set_as_default=False) as client:
        argv = [sys.executable, "-m", "distributed.cli.dask_worker",
                scheduler_only.scheduler_address, "--nthreads", "1", "--no-nanny",
                "--memory-limit", "1GiB", "--death-timeout", "30"]
        start = time.perf_counter()
        workers = [subprocess.Popen([*argv, "--name", f"bare-{i}"], stdout=subprocess.DEVNULL,
                                    stderr=subprocess.DEVNULL) for i in range(n)]
        try:
            client.wait_for_workers(n, timeout=WAIT)
            return time.perf_counter() - start
        finally:
            for worker in workers:
                worker.terminate()
            for worker in workers:
                try:
                    worker.wait(20)
                except subprocess.TimeoutExpired:
                    worker.kill()


def floor_once(system: str, n: int) -> dict[str, float]:
    """The floor of one repetition: the pool's start of n jobs plus n bare workers."""
    pool = pool_start(system, n)
    workers = bare_workers(n)
    return {"value": pool + workers, "pool": pool, "workers": workers}


# --------------------------------------------------------------------------- run
#: Every variant, in the order of the table.
VARIANTS = ("hybrid", "hybrid (plain TCP)", "dask-jobqueue", "floor")

def run(results: Results, systems: list[str], sizes: list[int], repeats: int,
        variants: list[str]) -> None:
    """Every (system, n, variant), ``repeats`` times, interleaved."""
    runners = {"hybrid": hybrid_once, "dask-jobqueue": jobqueue_once,
               "hybrid (plain TCP)": lambda system, n, staging: hybrid_once(
                   system, n, staging, tls=False),
               "floor": lambda system, n, staging: floor_once(system, n)}
    available = []
    for system in systems:
        problem = realpools.problem(system)
        if problem:
            results.skip(f"scale-up ({system})", problem)
        else:
            available.append(system)
    chosen = list(variants)
    if "dask-jobqueue" in chosen and (problem := realpools.jobqueue_problem()):
        results.skip("scale-up (dask-jobqueue)", problem)
        chosen.remove("dask-jobqueue")
    if not available:
        return
    with tempfile.TemporaryDirectory(prefix="hybrid-bench-") as tmp, \
            realpools.condor_tools() if "htcondor" in available else _nothing():
        staging = Path(tmp)
        turn = 0
        for repetition in range(repeats):
            log(f"scale-up: repetition {repetition + 1} of {repeats}")
            for system in available:
                for n in sizes:
                    for variant in rotated(chosen, turn):
                        turn += 1
                        measure = results.measure("scale-up", system, f"n={n}", variant)
                        repeat(measure, lambda v=variant, s=system, k=n:
                               runners[v](s, k, staging))
    split_extras(results)


#: Extra numbers of a scale-up repetition -> (benchmark, variant suffix) of their own rows.
EXTRAS = {"close": ("close", ""), "gone": ("queue empty after close", ""),
          "pool": ("scale-up", ": pool start"), "workers": ("scale-up", ": bare workers")}


def split_extras(results: Results) -> None:
    """Give the close times, the queue times and the floor's two parts rows of their own."""
    for m in list(results.measures):
        if m.benchmark != "scale-up":
            continue
        for key, (benchmark, suffix) in EXTRAS.items():
            if key in m.extra:
                results.measure(benchmark, m.system, m.config,
                                m.variant + suffix).samples = list(m.extra[key])


class _nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None
