"""One benchmark repetition of hybrid on HTCondor with ``job_files: shared``, run AS THE POOL'S
JOB USER (:func:`benchmarks.realpools.run_as_pool_user`); prints its numbers as one JSON line.

    python -m benchmarks._pool_user scale-up|submit N STAGING SHARED_DIR [OPTION ...]

OPTION: ``transfer``, ``nanny``, ``fork``, ``nowatch``, ``plain``.

``transfer``: ``job_files: transfer`` instead (the local schedd transfers the files from the
staging directory, no spooling); ``nanny`` (scale-up only): the workers start with a nanny
and a dashboard each; ``fork``: each nanny forks its worker
(``distributed.worker.multiprocessing-method: fork``); ``nowatch``: the job script does not
watch the worker's memory (``distributed.worker.memory.terminate: false`` for the workers);
``plain`` (scale-up only): plain TCP (``security=False``), no TLS.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

SHARED = "hybrid.batch.htcondor.shared-directories"


def main(benchmark: str, n: str, staging: str, shared: str, *options: str) -> None:
    """The repetition; its numbers on stdout."""
    unknown = set(options) - {"transfer", "nanny", "fork", "nowatch", "plain"}
    if unknown or (set(options) - {"transfer"} and benchmark != "scale-up"):
        raise SystemExit(f"unknown options for {benchmark}: {' '.join(options)}")
    mode = "transfer" if "transfer" in options else "shared"
    settings = {"hybrid.batch.htcondor.job-files": mode, SHARED: [shared]}
    if benchmark == "scale-up":
        from benchmarks.launchers import FORK, hybrid_once, worker_dask_config

        if "fork" in options:
            settings.update(worker_dask_config(FORK))
        if "nowatch" in options:
            settings.update(worker_dask_config({"distributed.worker.memory.terminate": False}))
        nanny = "nanny" in options
        numbers = hybrid_once("htcondor", int(n), Path(staging), settings=settings,
                              nanny=nanny, dashboard=nanny, tls="plain" not in options)
    else:
        from benchmarks.submit import hybrid_once

        numbers = hybrid_once("htcondor", int(n), Path(staging), settings=settings)
    print(json.dumps(numbers))


if __name__ == "__main__":
    main(*sys.argv[1:])
