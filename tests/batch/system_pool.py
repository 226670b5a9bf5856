"""A test helper that drives one batch system directly: submit, read back, remove.

The pool manager (hybrid.manager) does this for real clusters; these tests look at the
systems themselves, one call at a time, so they use this thin synchronous driver.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

from hybrid.batch import BatchSystem, JobStatus, Staging, WorkerJob
from hybrid.batch.base import worker_name_suffix
from hybrid.pools import PoolSpec
from hybrid.worker import Connection


class SystemPool:
    """One pool's jobs on one system, tracked by id."""

    def __init__(self, system: BatchSystem, job: WorkerJob):
        self.system = system
        self.job = job
        self.ids: list[str] = []
        self.staging: Staging | None = None

    @classmethod
    def of(cls, system: BatchSystem, cluster: str, pool: str, scheduler: str,
           **options: Any) -> SystemPool:
        spec = PoolSpec.build(pool, system.name, check_paths=False, **options)
        return cls(system, WorkerJob(cluster, spec, Connection(scheduler)))

    def submit(self, count: int) -> list[str]:
        if self.staging is None:
            self.staging = Staging.create(self.job)
        ids = self.system.submit(self.job, self.staging.path, count)
        self.ids += ids
        return ids

    def refresh(self) -> dict[str, JobStatus]:
        return {s.job_id: s for s in self.system.query(job_ids=self.ids, history=True)}

    def active(self) -> list[str]:
        return [j for j, s in self.refresh().items() if s.state.active]

    def remove(self, ids: Iterable[str]) -> None:
        self.system.remove(list(ids))

    def job_id_of_worker(self, name: str) -> str | None:
        by_suffix = {worker_name_suffix(j): j for j in self.ids}
        prefix = self.job.name_prefix + "-"
        return by_suffix.get(name[len(prefix):]) if name.startswith(prefix) else None

    def close(self, timeout: float = 60) -> None:
        self.system.remove_cluster(self.job.cluster)
        deadline = time.monotonic() + timeout
        while any(s.state.active for s in self.system.query(cluster=self.job.cluster)):
            assert time.monotonic() < deadline, "jobs still listed after removal"
            time.sleep(0.2)
        if self.staging is not None:
            self.staging.remove()
