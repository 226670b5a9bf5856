"""Workers of one cluster hash strings alike, with a nanny or without (hybrid's default).

A nanny gives its worker ``PYTHONHASHSEED=6640`` (dask/distributed#4141, #8400) and the rest of
``distributed.nanny.pre-spawn-environ`` (trim freed memory, one OpenMP/BLAS thread per task
thread). A worker started without one (``dask worker --no-nanny``, hybrid's default) had
none of that: each hashed strings its own way, so what a user's code splits by ``hash``
landed in different buckets on different workers. Each job now exports that environment
itself.

REAL scheduler and workers: a ``local`` pool runs the job scripts as local processes.
"""

from __future__ import annotations

import dask
import dask.bag as db
import pytest

from hybrid import HybridCluster

QUICK = {"hybrid.batch.poll-interval": "0.5s"}


def _environment() -> dict[str, str | None]:
    import os

    names = ("PYTHONHASHSEED", "MALLOC_TRIM_THRESHOLD_", "OMP_NUM_THREADS")
    return {name: os.environ.get(name) for name in names}


FORK = {"hybrid.worker-dask-config": {
    **dask.config.get("hybrid.worker-dask-config"),
    "distributed.worker.multiprocessing-method": "fork"}}


def _start_method() -> str:
    """How this worker's process was started by its nanny: a spawned python runs
    multiprocessing's ``spawn_main``; a forked one keeps the nanny's command line."""
    import psutil

    return "spawn" if "--multiprocessing-fork" in psutil.Process().cmdline() else "fork"


@pytest.mark.timeout(300)
@pytest.mark.parametrize(("nanny", "settings"), [(False, {}), (True, {}), (True, FORK)],
                         ids=["no-nanny", "nanny", "nanny-forking-its-worker"])
def test_workers_hash_alike_and_get_the_nanny_environment(nanny, settings, staging) -> None:
    """(A nanny that forks its worker, docs/pools.md's faster start, passes on what the job
    exported: the same environment.)"""
    with dask.config.set({**QUICK, **settings}), HybridCluster() as cluster:
        cluster.add_pool("w", "local", nanny=nanny)
        cluster.scale(3)
        cluster.wait_for_workers(3, timeout=120, progress=False)
        with cluster.get_client() as client:
            seeds = client.run(_environment)
            assert len(seeds) == 3
            for environment in seeds.values():
                assert environment["PYTHONHASHSEED"] == "6640"  # distributed's own value
                assert environment["MALLOC_TRIM_THRESHOLD_"] == "65536"
                assert environment["OMP_NUM_THREADS"] == "1"
            assert len(set(client.run(hash, "hybrid").values())) == 1
            # a user's own partitioning by hash, as tasks spread over the workers
            words = [f"word-{i % 7}" for i in range(63)]
            buckets = db.from_sequence(words, npartitions=9).map(
                lambda w: (w, hash(w) % 5)).distinct().compute(scheduler=client)
            assert len(buckets) == 7  # each word in one bucket, whichever worker hashed it
            if nanny:  # the workers are the nannies' children, started the configured way
                method = "fork" if settings else "spawn"
                assert set(client.run(_start_method).values()) == {method}


def test_a_pool_env_overrides_the_nanny_environment(staging) -> None:
    """The user's ``env`` wins over the exported defaults, in the rendered job script."""
    with dask.config.set(QUICK), HybridCluster() as cluster:
        cluster.add_pool("w", "slurm", walltime="00:10", env={"OMP_NUM_THREADS": "8"})
        script = cluster.job_script("w")
    assert "export PYTHONHASHSEED=6640" in script
    assert '[ -n "${MALLOC_TRIM_THRESHOLD_+set}" ] || MALLOC_TRIM_THRESHOLD_=65536' in script
    assert "export OMP_NUM_THREADS=8" in script
    assert "OMP_NUM_THREADS=1" not in script


@pytest.mark.parametrize("environ", ["not a mapping", {"BAD NAME": 1}],
                         ids=["not-a-mapping", "not-a-variable-name"])
def test_a_bad_pre_spawn_environ_is_refused_by_add_pool(environ, staging) -> None:
    """It lands in every job script: refused at the edge, naming the key, nothing staged."""
    from hybrid.errors import ConfigurationError

    with HybridCluster() as cluster:
        with dask.config.set({"distributed.nanny.pre-spawn-environ": environ}), \
                pytest.raises(ConfigurationError, match="pre-spawn-environ"):
            cluster.add_pool("w", "slurm", walltime="00:10")
        assert "w" not in cluster.pools
