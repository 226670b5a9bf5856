"""The floors a launcher is measured against: what the batch system itself takes.

``floor: bare-worker jobs`` (B): the barest way to get n Dask workers from the same pool: n
jobs in ONE submission (an HTCondor cluster of n procs, a Slurm or Grid Engine array), each
running
``python -m distributed.cli.dask_worker SCHEDULER --no-nanny`` with the worker options hybrid
gives its own (one thread, 1 GiB, no dashboard), the same python, no file transfer (HTCondor
reads nothing: the python and its arguments are the job), timed from the submission to n
workers connected to a scheduler in this process. No launcher can start the same workers
faster on this pool: what hybrid adds on top of B is its own cost.

``floor: bare-worker jobs (TLS)``: B with TLS as hybrid's default: the scheduler speaks only
``tls://`` with client certificates (``distributed.Security.temporary()``, as hybrid makes
its own), and the bare workers read the same kind of files (``--tls-ca-file``, ``--tls-cert``,
``--tls-key``, mode 0600, owned by the user the jobs run as). B is the barest start; this is
the barest start of workers that connect as hybrid's do.

``floor: batch start`` (C): n trivial jobs in one submission, each writing a time stamp when
it starts and then waiting to be removed, timed from the submission to the last stamp: the
batch system's own time to start n jobs, without python.

Both record the post-match time as the launchers do (:mod:`benchmarks.postmatch`).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from benchmarks import postmatch, realpools
from benchmarks.launchers import WAIT, timings, wait_until
from hybrid.batch.staging import write_private

#: The worker options of hybrid's own workers of one thread and 1 GiB (hybrid/worker.py).
WORKER_OPTIONS = ["--nthreads", "1", "--memory-limit", str(2**30), "--no-nanny",
                  "--no-dashboard", "--death-timeout", "60"]


#: As hybrid's HTCondor jobs (``hybrid.batch.htcondor.job-max-vacate-time``): a removed job
#: is killed 10 s after its SIGTERM at the latest, not after the pool's default 10 minutes.
_VACATE = {"job_max_vacate_time": "10"}


def _partition() -> str:
    return os.environ.get("HYBRID_CI_SLURM_PARTITION", "debug")


def _job_directory() -> Path:
    """A directory the jobs see at the same path: the HTCondor pool's shared one (Slurm's
    jobs see this machine's own filesystem)."""
    shared = realpools.shared_dir() if os.environ.get("HYBRID_CONDOR_CHROOT") else None
    directory = Path(tempfile.mkdtemp(prefix="bench-floor-", dir=shared))
    directory.chmod(0o1777)  # the pool's job user writes its stamps here
    return directory


# --------------------------------------------------------------------------- B
def bare_worker_jobs(system: str, n: int, *, tls: bool = False) -> dict[str, float]:
    """B: n bare-worker jobs in one submission, until n workers are connected (``tls``:
    to a scheduler that speaks only TLS with client certificates)."""
    from distributed import Client, LocalCluster
    from distributed.security import Security

    marker = f"bench{uuid.uuid4().hex[:8]}"
    directory = _job_directory()
    security = Security.temporary() if tls else Security()
    try:
        options = [*WORKER_OPTIONS, *(_tls_options(system, security, directory) if tls else [])]
        with LocalCluster(n_workers=0, host="127.0.0.1", protocol="tls://" if tls else "tcp://",
                          processes=False, dashboard_address=None,
                          scheduler_kwargs={"dashboard_address": "127.0.0.1:0"},  # (not :8787)
                          security=security) as scheduler_only, \
                Client(scheduler_only, security=security, set_as_default=False) as client:
            address = scheduler_only.scheduler_address
            start = postmatch.now()
            if system == "htcondor":
                _condor_bare_workers(address, n, marker, directory, options)
            elif system == "sge":
                _sge_submit(n, marker, directory, " ".join(
                    [sys.executable, "-m", "distributed.cli.dask_worker", address,
                     *options, "--name", "bare-$SGE_TASK_ID"]))
            else:
                _slurm_bare_workers(address, n, marker, directory, options)
            client.wait_for_workers(n, timeout=WAIT)
            connected = postmatch.registered(client, n, postmatch.now())
            match = postmatch.first_match(system, _ids(system, marker))
            closing = postmatch.now()
            _remove(system, marker)
            closed = postmatch.now()
        return timings(start, connected, match, closing, closed, _gone(system, marker))
    finally:
        _remove(system, marker)
        shutil.rmtree(directory, ignore_errors=True)


def _tls_options(system: str, security, directory: Path) -> list[str]:
    """The worker options for ``security``'s CA, certificate and key, written to files in
    ``directory`` (0600, owned by the user the jobs of ``system`` run as)."""
    owner = realpools.pool_user() if system == "htcondor" else None
    options = []
    for option, pem in (("--tls-ca-file", security.tls_ca_file),
                        ("--tls-cert", security.tls_worker_cert),
                        ("--tls-key", security.tls_worker_key)):
        path = write_private(directory / option.removeprefix("--tls-"), pem)
        if owner is not None:
            os.chown(path, *owner)
        options += [option, str(path)]
    return options


def _condor_bare_workers(address: str, n: int, marker: str, directory: Path,
                         options: list[str]) -> None:
    import htcondor2

    arguments = " ".join(["-m", "distributed.cli.dask_worker", address, *options,
                          "--name", "bare-$(ProcId)"])
    htcondor2.Schedd().submit(htcondor2.Submit({
        "universe": "vanilla", "executable": sys.executable, "arguments": arguments,
        "initialdir": str(directory), "should_transfer_files": "NO",
        "output": "/dev/null", "error": "/dev/null",
        "request_cpus": "1", "request_memory": "1024", "My.BenchMarker": f'"{marker}"',
        "leave_in_queue": "false", **_VACATE}), count=n)


def _slurm_bare_workers(address: str, n: int, marker: str, directory: Path,
                        options: list[str]) -> None:
    command = " ".join([sys.executable, "-m", "distributed.cli.dask_worker", address,
                        *options, "--name", "bare-$SLURM_ARRAY_TASK_ID"])
    subprocess.run(
        ["sbatch", f"--array=1-{n}", f"--job-name={marker}", "--output=/dev/null",
         "--cpus-per-task=1", "--mem=1024M", "--time=00:30:00", "--export=NIL",
         f"--chdir={directory}", f"--partition={_partition()}", f"--wrap=exec {command}"],
        check=True, capture_output=True, text=True, timeout=60)


def _sge_submit(n: int, marker: str, directory: Path, command: str) -> None:
    """``qsub -t 1-n`` of ``command`` (run with ``exec``) in ``directory``, as hybrid's Grid
    Engine jobs ask: one slot of the CI queue, mem_free=1 GiB."""
    subprocess.run(
        ["qsub", "-terse", "-t", f"1-{n}", "-N", marker, "-o", "/dev/null", "-j", "y",
         "-S", "/bin/sh", "-wd", str(directory), "-l", "h_rt=00:30:00,mem_free=1024M",
         "-q", os.environ.get("HYBRID_CI_SGE_QUEUE", "hybrid.q")],
        input=f"exec {command}\n", check=True, capture_output=True, text=True, timeout=60)


# --------------------------------------------------------------------------- C
def batch_start(system: str, n: int) -> dict[str, float]:
    """C: n trivial jobs in one submission, until the last one started."""
    marker = f"bench{uuid.uuid4().hex[:8]}"
    stamps = _job_directory()
    try:
        offset = time.time() - postmatch.now()  # the stamps are wall-clock times
        start = postmatch.now()
        if system == "htcondor":
            import htcondor2

            htcondor2.Schedd().submit(htcondor2.Submit({
                "universe": "vanilla", "executable": "/bin/sh",
                "arguments": f"\"-c 'date +%s.%N > {stamps}/$(ProcId).tmp && "
                             f"mv {stamps}/$(ProcId).tmp {stamps}/$(ProcId) && exec sleep 600'\"",
                "initialdir": str(stamps), "should_transfer_files": "NO",
                "output": "/dev/null", "error": "/dev/null",
                "request_cpus": "1", "request_memory": "1024",
                "My.BenchMarker": f'"{marker}"', "leave_in_queue": "false",
                **_VACATE}), count=n)
        elif system == "sge":
            _sge_submit(n, marker, stamps,
                        f"sh -c 'date +%s.%N > {stamps}/$SGE_TASK_ID.tmp && mv "
                        f"{stamps}/$SGE_TASK_ID.tmp {stamps}/$SGE_TASK_ID && exec sleep 600'")
        else:
            subprocess.run(
                ["sbatch", f"--array=1-{n}", f"--job-name={marker}", "--output=/dev/null",
                 "--cpus-per-task=1", "--mem=1024M", "--time=00:30:00", "--export=NIL",
                 f"--partition={_partition()}",
                 f"--wrap=date +%s.%N > {stamps}/$SLURM_ARRAY_TASK_ID.tmp && mv "
                 f"{stamps}/$SLURM_ARRAY_TASK_ID.tmp {stamps}/$SLURM_ARRAY_TASK_ID && "
                 "exec sleep 600"],
                check=True, capture_output=True, text=True, timeout=60)

        def started() -> int:
            return sum(1 for p in stamps.iterdir() if not p.name.endswith(".tmp"))

        wait_until(lambda: started() >= n, WAIT, "the floor's jobs did not all start",
                   pause=0.05)
        last = max(float(p.read_text()) for p in stamps.iterdir()
                   if not p.name.endswith(".tmp")) - offset
        match = postmatch.first_match(system, _ids(system, marker))
        closing = postmatch.now()
        _remove(system, marker)
        closed = postmatch.now()
        return timings(start, last, match, closing, closed, _gone(system, marker))
    finally:
        _remove(system, marker)
        shutil.rmtree(stamps, ignore_errors=True)


# --------------------------------------------------------------------------- jobs
def _gone(system: str, marker: str) -> float:
    """When the removed jobs left the queue; NaN past 120 s. The floors are measured for
    their start, not their removal: a job the batch system is slow to take down (on the CI
    HTCondor pool, now and then a starter that never signals its job after a removal, so the
    job leaves only after the startd's vacate timeout) costs this number, not the sample."""
    import math

    try:
        return wait_until(lambda: _in_queue(system, marker) == 0, 120,
                          "the floor's jobs still in the queue")
    except TimeoutError as error:
        from benchmarks.harness import log

        log(f"floor ({system}): {error}; its start is kept, its removal time is not")
        return math.nan
def _ids(system: str, marker: str) -> list[str]:
    if system == "htcondor":
        return postmatch.condor_job_ids(f'BenchMarker == "{marker}"')
    if system == "sge":
        return postmatch.sge_job_ids(name=marker)
    return postmatch.slurm_job_ids(name=marker)


def _in_queue(system: str, marker: str) -> int:
    if system == "htcondor":
        return realpools.condor_in_queue(f'BenchMarker == "{marker}"')
    if system == "sge":
        return realpools.sge_in_queue(name=marker)
    return realpools.slurm_in_queue(name=marker)


def _remove(system: str, marker: str) -> None:
    realpools.remove_named(system, marker)
