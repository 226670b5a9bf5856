"""One scale-up with a launcher: hybrid or dask-jobqueue, as shipped or like for like.

Each function runs ``scale(n)`` then ``client.wait_for_workers(n)`` (timed), then ``close()``
(timed) and the wait until the batch system lists none of the cluster's jobs (timed), and
returns those numbers with the post-match time (:mod:`benchmarks.postmatch`): from the batch
system's first match to n workers connected. Every worker has one thread and 1 GiB.

``nanny``/``dashboard`` choose how the workers start: hybrid ships without either,
dask-jobqueue with both; the like-for-like variants give each the other's. hybrid runs with
its default TLS (a temporary CA per cluster, made before the clock starts); ``tls=False``
gives it plain TCP, as dask-jobqueue's clusters run.
"""

from __future__ import annotations

import os
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import dask
from distributed import Client

from benchmarks import postmatch, realpools

#: How long one repetition may wait for its workers.
WAIT = 180
#: The packaged tag of hybrid's jobs (``hybrid.batch.tag``).
TAG = "HybridCluster"


def wait_until(predicate: Callable[[], bool], timeout: float, what: str,
               pause: float = 0.02) -> float:
    """Poll ``predicate`` until it holds; the :func:`benchmarks.postmatch.now` when it did."""
    deadline = time.monotonic() + timeout
    while True:
        if predicate():
            return postmatch.now()
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} after {timeout:g} s")
        time.sleep(pause)


def timings(start: float, connected: float, match: float | None, closing: float,
            closed: float, gone: float) -> dict[str, float]:
    """The numbers of one repetition (all times in :func:`benchmarks.postmatch.now`'s clock).

    ``value``: submit to n connected; ``match``: submit to the first match; ``post-match``:
    first match to n connected; ``close``; ``gone``: close() returning to an empty queue."""
    out = {"value": connected - start, "close": closed - closing, "gone": gone - closed}
    if match is not None:
        out["match"] = match - start
        out["post-match"] = connected - match
    return out


def _match_of(system: str, ids: Callable[[], list[str]]) -> float | None:
    try:
        return postmatch.first_match(system, ids())
    except Exception:  # a lookup that failed costs the post-match number, not the sample
        return None


# --------------------------------------------------------------------------- hybrid
#: Worker settings with which each nanny forks its worker instead of spawning a python.
FORK = {"distributed.worker.multiprocessing-method": "fork"}


def worker_dask_config(extra: dict[str, Any]) -> dict[str, Any]:
    """Settings that add ``extra`` to the workers' Dask settings
    (``hybrid.worker-dask-config``), keeping the ones hybrid exports by default."""
    return {"hybrid.worker-dask-config": {**dask.config.get("hybrid.worker-dask-config", {}),
                                          **extra}}


def hybrid_once(system: str, n: int, staging: Path, *, nanny: bool = False,
                dashboard: bool = False, tls: bool = True,
                settings: dict[str, Any] | None = None) -> dict[str, float]:
    """One repetition with a :class:`hybrid.HybridCluster` of one pool on ``system``
    (``tls=False``: ``security=False``, plain TCP)."""
    from hybrid import HybridCluster

    name = f"bench-{uuid.uuid4().hex[:8]}"
    config = {"hybrid.batch.staging-directory": str(staging),
              "hybrid.scheduler.host": "127.0.0.1", **(settings or {})}
    with dask.config.set(config):
        cluster = HybridCluster(name=name, dashboard_address=None,
                                **({} if tls else {"security": False}))
        match = None
        try:
            cluster.add_pool("w", system=system, cores=1, memory="1 GiB", walltime="00:30",
                             nanny=nanny, worker_extra_args=["--dashboard"] if dashboard else [])
            with Client(cluster.scheduler_address, security=cluster.security,
                        set_as_default=False) as client:
                start = postmatch.now()
                cluster.scale(n)
                client.wait_for_workers(n, timeout=WAIT)
                connected = postmatch.registered(client, n, postmatch.now())
            match = _match_of(system, lambda: _ids_hybrid(system, name))
        finally:
            closing = postmatch.now()
            cluster.close()
            closed = postmatch.now()
    gone = wait_until(lambda: _in_queue_hybrid(system, name) == 0, 120,
                      "hybrid's jobs still in the queue")
    return timings(start, connected, match, closing, closed, gone)


def _ids_hybrid(system: str, cluster: str) -> list[str]:
    if system == "htcondor":
        return postmatch.condor_job_ids(f'{TAG} == "{cluster}"')
    if system == "sge":
        return postmatch.sge_job_ids(name_prefix=f"{TAG}-{cluster}-")
    return postmatch.slurm_job_ids(comment_prefix=f"{TAG}:{cluster}:")


def _in_queue_hybrid(system: str, cluster: str) -> int:
    if system == "htcondor":
        return realpools.condor_in_queue(f'{TAG} == "{cluster}"')
    if system == "sge":
        return realpools.sge_in_queue(name_prefix=f"{TAG}-{cluster}-")
    return realpools.slurm_in_queue(comment_prefix=f"{TAG}:{cluster}:")


def hybrid_shared_once(system: str, n: int, staging: Path, *, nanny: bool = False,
                       fork: bool = False, transfer: bool = False,
                       watch: bool = True, tls: bool = True) -> dict[str, float]:
    """hybrid on HTCondor with its files read in place (``job_files: shared``), run by the
    pool's job user from a staging directory in the pool's shared filesystem, as a site's
    user would (:func:`benchmarks.realpools.run_as_pool_user`); ``nanny``: with a nanny and
    a dashboard per worker; ``fork``: each nanny forks its worker (:data:`FORK`);
    ``transfer``: ``job_files: transfer`` instead (transferred from there, not spooled);
    ``watch=False``: the job script does not watch the worker's memory; ``tls=False``: plain
    TCP."""
    if system != "htcondor":
        raise ValueError("the pool user's variants are HTCondor's")
    return realpools.run_as_pool_user(
        "scale-up", n, timeout=WAIT + 200,
        options=["transfer"] * transfer + ["nanny"] * nanny + ["fork"] * fork
        + ["nowatch"] * (not watch) + ["plain"] * (not tls))


# --------------------------------------------------------------------------- dask-jobqueue
def jobqueue_once(system: str, n: int, staging: Path, *, nanny: bool = True,
                  dashboard: bool = True) -> dict[str, float]:
    """One repetition with dask-jobqueue's cluster for ``system`` (its defaults: a nanny and
    a dashboard per worker; ``nanny=False, dashboard=False`` for hybrid's way)."""
    marker = f"bench{uuid.uuid4().hex[:8]}"
    common: dict[str, Any] = {
        "cores": 1, "memory": "1GiB", "python": sys.executable, "nanny": nanny,
        "scheduler_options": {"host": "127.0.0.1", "dashboard_address": None},
        "local_directory": str(staging)}
    if not dashboard:
        common["worker_extra_args"] = ["--no-dashboard"]
    if system == "htcondor":
        from dask_jobqueue import HTCondorCluster

        constraint = f'BenchMarker == "{marker}"'

        def in_queue() -> int:
            return realpools.condor_in_queue(constraint)

        def ids() -> list[str]:
            return postmatch.condor_job_ids(constraint)

        make = lambda: HTCondorCluster(  # noqa: E731
            disk="1GiB", job_extra_directives={"My.BenchMarker": f'"{marker}"'}, **common)
    elif system == "sge":
        from dask_jobqueue import SGECluster

        def in_queue() -> int:
            return realpools.sge_in_queue(name=marker)

        def ids() -> list[str]:
            return postmatch.sge_job_ids(name=marker)

        # the same request as hybrid's pool: one slot, mem_free=1 GiB, one output file
        make = lambda: SGECluster(  # noqa: E731
            queue=os.environ.get("HYBRID_CI_SGE_QUEUE", "hybrid.q"), walltime="00:30:00",
            job_name=marker, resource_spec="mem_free=1G",
            job_extra_directives=["-o /dev/null"], **common)
    else:
        from dask_jobqueue import SLURMCluster

        def in_queue() -> int:
            return realpools.slurm_in_queue(name=marker)

        def ids() -> list[str]:
            return postmatch.slurm_job_ids(name=marker)

        make = lambda: SLURMCluster(  # noqa: E731
            queue=os.environ.get("HYBRID_CI_SLURM_PARTITION", "debug"), walltime="00:30:00",
            job_name=marker, job_extra_directives=["--output=/dev/null"], **common)
    cluster = make()
    match = None
    try:
        with Client(cluster.scheduler_address, set_as_default=False) as client:
            start = postmatch.now()
            cluster.scale(n)
            client.wait_for_workers(n, timeout=WAIT)
            connected = postmatch.registered(client, n, postmatch.now())
        match = _match_of(system, ids)
    finally:
        closing = postmatch.now()
        cluster.close()
        closed = postmatch.now()
    try:
        gone = wait_until(lambda: in_queue() == 0, 120, "dask-jobqueue's jobs still queued")
    finally:
        realpools.remove_named(system, marker)
    return timings(start, connected, match, closing, closed, gone)
