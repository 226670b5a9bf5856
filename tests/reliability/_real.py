"""What the REAL batch systems hold, asked of them directly (not of hybrid's bookkeeping),
and dask configuration merged the way dask merges a YAML file or the environment.

Shared by the reliability tests of bad input, secrets and concurrency.
"""

from __future__ import annotations

import contextlib
import copy
import subprocess
from collections.abc import Iterator
from typing import Any

import dask

_MISSING = object()


#: Slurm states of jobs that have left for good.
SLURM_ENDED = ("COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "OUT_OF_MEMORY")


def squeue() -> list[tuple[str, str, str]]:
    """``(job id, name, comment)`` of every job (array task) in the real Slurm queue that
    has not ended."""
    out = subprocess.run(["squeue", "--noheader", "--array", "--states=all",
                          "--format=%i\x1f%T\x1f%j\x1f%k"], capture_output=True, text=True,
                         check=True, timeout=60).stdout
    records = [line.split("\x1f", 3) for line in out.splitlines()]
    return [(job_id, name, comment) for job_id, state, name, comment in records
            if state not in SLURM_ENDED]


def condor_ads(constraint: str = "true") -> list[Any]:
    """The job ads of the real HTCondor queue that match ``constraint``, but for jobs
    removed or completed (still listed while they leave)."""
    import htcondor2

    return list(htcondor2.Schedd().query(
        constraint=f"({constraint}) && JobStatus =!= 3 && JobStatus =!= 4"))


def slurm_jobs(marker: str) -> list[str]:
    """Jobs in the real Slurm queue whose name or comment contains ``marker``:
    ``JOBID name comment``."""
    return [f"{job_id} {name} {comment}" for job_id, name, comment in squeue()
            if marker in name + comment]


def condor_jobs(marker: str) -> list[str]:
    """Jobs in the real HTCondor queue with ``marker`` in any attribute: ``ClusterId.ProcId``."""
    return [f"{ad['ClusterId']}.{ad['ProcId']}" for ad in condor_ads() if marker in str(ad)]


def real_jobs(marker: str) -> list[str]:
    """Every active job of the real Slurm and HTCondor that mentions ``marker``."""
    return ([f"slurm {j}" for j in slurm_jobs(marker)]
            + [f"htcondor {j}" for j in condor_jobs(marker)])


@contextlib.contextmanager
def configured(tree: dict[str, Any]) -> Iterator[None]:
    """Merge ``tree`` (as ``dask.config.collect`` returns it from YAML files or
    ``DASK_...`` variables) into dask's configuration the way ``dask.config.refresh`` merges
    it (canonical names, mappings merged key by key), and restore every value afterwards."""
    undo: list[tuple[dict[str, Any], str, Any]] = []

    def merge(new: dict[str, Any], old: dict[str, Any]) -> None:
        for key, value in new.items():
            name = dask.config.canonical_name(key, old)
            if isinstance(value, dict) and isinstance(old.get(name), dict):
                merge(value, old[name])
            else:
                undo.append((old, name, old.get(name, _MISSING)))
                old[name] = copy.deepcopy(value)

    merge(tree, dask.config.config)
    try:
        yield
    finally:
        for where, name, previous in reversed(undo):
            if previous is _MISSING:
                where.pop(name, None)
            else:
                where[name] = previous
