"""Leftovers whose cluster is gone: what ``hybrid gc`` finds and removes.

A job is an orphan when its scheduler no longer answers; a staging directory or a kept
object (a Kubernetes Secret) when, besides, no job of its cluster is in the queue.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from hybrid.batch.jobs import DEFAULT_TAG, JobState, JobStatus, tag_prefix
from hybrid.batch.staging import Staging, staging_directories

if TYPE_CHECKING:
    from hybrid.batch.base import BatchSystem

def scheduler_reachable(address: str | None, timeout: float = 3.0) -> bool:
    """True when something accepts TCP connections at the scheduler address (or when the
    address is unknown: never remove what cannot be judged)."""
    import socket

    from distributed.comm.addressing import get_address_host_port

    if not address:
        return True
    try:
        host, port = get_address_host_port(address)
    except (ValueError, TypeError):
        return True
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def find_orphans(system: BatchSystem, timeout: float = 3.0) -> list[JobStatus]:
    """Active jobs of ours whose scheduler no longer answers."""
    verdict: dict[str | None, bool] = {}
    orphans = []
    for job in system.query():
        if not job.state.active or job.state is JobState.removing:
            continue
        if job.scheduler not in verdict:
            verdict[job.scheduler] = scheduler_reachable(job.scheduler, timeout)
        if not verdict[job.scheduler]:
            orphans.append(job)
    return orphans


def remove_orphaned_staging(system: BatchSystem, timeout: float = 3.0,
                            dry_run: bool = False, removed: Iterable[str] = ()) -> list[Path]:
    """Staging directories of ``system``'s clusters that no job needs any more: none of the
    cluster's jobs is in the queue (jobs being removed, and the ``removed`` ids, e.g. the
    orphans ``hybrid gc`` just removed, do not count while they stop) and its scheduler does
    not answer. Removed unless ``dry_run``; returns them."""
    found = []
    live: set[str] | None = None
    gone = set(removed)
    tag = tag_prefix()
    for path in staging_directories():
        record = Staging.record(path)
        if record is None or record.get("system") != system.name:
            continue
        if record.get("tag", DEFAULT_TAG) != tag:
            continue  # another tag's (another user's): its jobs are not in this query
        if live is None:
            live = {j.cluster for j in system.query() if j.state.active and j.cluster
                    and j.state is not JobState.removing and j.job_id not in gone}
        if record.get("cluster") in live or scheduler_reachable(record.get("scheduler"),
                                                                timeout):
            continue
        found.append(path)
        if not dry_run:
            shutil.rmtree(path, ignore_errors=True)
    return found


def remove_orphaned_clusters(system: BatchSystem, timeout: float = 3.0,
                             dry_run: bool = False, removed: Iterable[str] = ()) -> list[str]:
    """Clusters whose leftovers besides jobs (a Kubernetes cluster's Secret) no job needs
    any more: none of the cluster's jobs is active (the ``removed`` ids do not count) and its
    scheduler does not answer. Their leftovers are dropped unless ``dry_run``."""
    kept = system.kept_clusters()
    if not kept:
        return []
    gone = set(removed)
    live = {j.cluster for j in system.query() if j.state.active and j.cluster
            and j.state is not JobState.removing and j.job_id not in gone}
    found = [name for name, scheduler in sorted(kept.items())
             if name not in live and not scheduler_reachable(scheduler, timeout)]
    if not dry_run:
        for name in found:
            system.cluster_closed(name)
    return found
