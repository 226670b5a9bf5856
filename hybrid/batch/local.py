"""Local processes as a pool system: the same worker script, run on this machine.

This is the embedded default of :class:`hybrid.HybridCluster` (``system="local"``): no batch
system, but the job script, the worker command, the naming and the bookkeeping are the ones
every batch pool uses. Job ids are ``local-<n>``; processes are tracked by PID and stopped by
their own process group only.
"""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterable
from pathlib import Path

from hybrid.batch.base import BatchSystem, JobSpec, JobState, JobStatus, write_private

_counter = itertools.count(1)


class LocalProcesses(BatchSystem):
    """Run each worker job as a local ``sh`` process in its own process group."""

    name = "local"
    template = "local.sh.j2"

    def __init__(self) -> None:
        self._procs: dict[str, tuple[subprocess.Popen, JobSpec]] = {}
        self._removed: set[str] = set()
        self._lock = threading.Lock()

    def submit(self, spec: JobSpec, staging: Path, count: int) -> list[str]:
        """Start ``count`` worker processes from one rendered script."""
        script = write_private(staging / "worker.sh", self.render(spec, staging, count), 0o700)
        ids = []
        for _ in range(count):
            job_id = f"local-{os.getpid()}-{next(_counter)}"
            log = open(staging / f"worker-{job_id}.log", "ab")
            try:
                proc = subprocess.Popen(
                    ["/bin/sh", str(script)], env={**os.environ, "HYBRID_JOB_ID": job_id},
                    stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                    start_new_session=True, cwd=staging,
                )
            finally:
                log.close()
            with self._lock:
                self._procs[job_id] = (proc, spec)
            ids.append(job_id)
        return ids

    def query(self, cluster: str | None = None, job_ids: Iterable[str] | None = None,
              history: bool = False) -> list[JobStatus]:
        """States of the processes this instance started."""
        wanted = set(job_ids) if job_ids is not None else None
        out = []
        with self._lock:
            items = list(self._procs.items())
        for job_id, (proc, spec) in items:
            if wanted is not None and job_id not in wanted:
                continue
            if cluster is not None and spec.cluster != cluster:
                continue
            code = proc.poll()
            if code is None:
                state, reason = JobState.running, None
            elif job_id in self._removed:
                state, reason = JobState.removed, "removed by hybrid"
            elif code == 0:
                state, reason = JobState.finished, None
            else:
                state, reason = JobState.failed, f"exit code {code}"
            if not state.active and not history and wanted is None:
                continue
            out.append(JobStatus(job_id, state, reason, spec.cluster, spec.pool,
                                 spec.worker.scheduler_address))
        return out

    def remove(self, job_ids: Iterable[str], timeout: float = 15) -> None:
        """SIGTERM each process group, SIGKILL it if still alive after ``timeout``."""
        procs = []
        with self._lock:
            for job_id in job_ids:
                if job_id in self._procs:
                    self._removed.add(job_id)
                    procs.append(self._procs[job_id][0])
        for proc in procs:
            if proc.poll() is None:
                _signal_group(proc, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for proc in procs:
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                _signal_group(proc, signal.SIGKILL)
                proc.wait(5)


def _signal_group(proc: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)
    except ProcessLookupError:
        pass
