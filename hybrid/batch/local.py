"""Local processes as a pool system: the same worker script, run on this machine.

This is the embedded default (``system="local"``): no batch system, but the job script, the
worker command, the naming and the bookkeeping are the ones every batch pool uses. Job ids
are ``local-<pid of the submitter>-<n>``; each job runs in its own process group. Every job
is recorded in its staging directory (``local-jobs/<id>.json``: PID, start time, cluster,
pool, scheduler), so another process of the same user lists and removes them too
(``connect`` after ``close(shutdown=False)``, ``hybrid gc``); a recorded PID counts only
while a process with that PID and that start time lives. A GPU pool's job gets its GPUs in
``CUDA_VISIBLE_DEVICES``, taken in turn from this process's ``CUDA_VISIBLE_DEVICES`` or else
``nvidia-smi``'s list, as a batch system hands a job the GPUs it was given. Each job gets a
temporary directory of its own (``TMPDIR``, where its worker keeps its scratch space), as a
batch system's job scratch; it is removed with the job, or once the job has ended, so a
worker killed at work (a removal kills at once) leaves no scratch behind.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import shutil
import signal
import subprocess
import tempfile
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import psutil

from hybrid.batch.base import BatchSystem
from hybrid.batch.jobs import JobState, JobStatus, WorkerJob
from hybrid.batch.staging import staging_directories, write_private
from hybrid.gpusharing import detect_gpus

_counter = itertools.count(1)
RECORDS = "local-jobs"


def _start_time(pid: int, reap: bool = True) -> float | None:
    """The start time of a live process (``None``: gone, or a zombie, reaped if ours and
    ``reap``: not a job this process holds, whose exit code its ``Popen`` reads)."""
    try:
        process = psutil.Process(pid)
        if process.status() == psutil.STATUS_ZOMBIE:
            if reap:
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(pid, os.WNOHANG)  # a child of this process: reap it
            return None
        return process.create_time()
    except psutil.Error:
        return None



#: What a local job takes from this process's environment, as a batch job would get it from
#: the node: the session's essentials, nothing else (no token, no password). The pool's own
#: ``env`` is exported by the job script.
_BASE_ENVIRONMENT = ("PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "TZ",
                     "TMPDIR")


def job_base_environment() -> dict[str, str]:
    """The environment a local job starts with (see ``_BASE_ENVIRONMENT``, and ``LC_*``)."""
    return {name: value for name, value in os.environ.items()
            if name in _BASE_ENVIRONMENT or name.startswith("LC_")}


class LocalProcesses(BatchSystem):
    """Run each worker job as a local ``bash`` process in its own process group."""

    name = "local"
    template = "local.sh.j2"
    makes_job_tmpdir = False  # submit() gives each job its TMPDIR, removed with the job

    def __init__(self, **settings: Any) -> None:
        super().__init__(**settings)
        self._procs: dict[str, subprocess.Popen] = {}
        self._lock = threading.Lock()

    def worker_listen_host(self, job: WorkerJob) -> str | None:
        """Where its scheduler listens, when that is an address of this machine (a local
        job runs here): ``HybridCluster(host="127.0.0.1")``'s workers on 127.0.0.1 only,
        not on every interface."""
        return listen_host(job.connection.scheduler_address)

    def submit(self, job: WorkerJob, staging: Path, count: int) -> list[str]:
        """Start ``count`` worker processes from one rendered script."""
        script = write_private(staging / "worker.sh", self.render(job, staging, count), 0o700)
        records = staging / RECORDS
        records.mkdir(mode=0o700, exist_ok=True)
        devices = detect_gpus() if job.spec.gpus else []
        ids = []
        for _ in range(count):
            number = next(_counter)
            job_id = f"local-{os.getpid()}-{number}"
            base = job_base_environment()
            scratch = tempfile.mkdtemp(prefix=f"hybrid-{job_id}-", dir=base.get("TMPDIR"))
            env = {**base, "HYBRID_JOB_ID": job_id, "TMPDIR": scratch}
            if devices:  # each GPU job gets its GPUs, as a batch system's would
                env["CUDA_VISIBLE_DEVICES"] = ",".join(
                    devices[(number * job.spec.gpus + j) % len(devices)]
                    for j in range(job.spec.gpus))
            # the worker's log is its owner's only, as its keys are
            with open(self.log_path(staging, job_id), "ab",
                      opener=lambda path, flags: os.open(path, flags, 0o600)) as log:
                proc = subprocess.Popen(
                    ["/bin/bash", str(script)],
                    env=env,
                    stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                    start_new_session=True, cwd=staging,
                )
            with self._lock:
                self._procs[job_id] = proc
            write_private(records / f"{job_id}.json", json.dumps({
                "job_id": job_id, "pid": proc.pid, "start": _start_time(proc.pid, reap=False),
                "cluster": job.cluster, "pool": job.pool,
                "scheduler": job.connection.scheduler_address, "scratch": scratch}))
            ids.append(job_id)
        return ids

    def _records(self, cluster: str | None) -> list[tuple[Path, dict[str, Any]]]:
        found = []
        for staging in staging_directories(cluster):
            for path in sorted((staging / RECORDS).glob("*.json")):
                try:
                    record = json.loads(path.read_text())
                except (OSError, ValueError):
                    continue
                if cluster is None or record.get("cluster") == cluster:
                    found.append((path, record))
        return found

    def _state(self, path: Path, record: dict[str, Any]) -> tuple[JobState, str | None]:
        job_id = record["job_id"]
        removed = path.with_suffix(".removed").exists()
        with self._lock:
            proc = self._procs.get(job_id)
        if proc is not None:
            code = proc.poll()
            if code is None:
                return JobState.running, None
        else:
            alive = record.get("start") is not None and _start_time(record["pid"]) == record[
                "start"]
            if alive:
                return JobState.running, None
            code = None
        _remove_scratch(record)  # (the job has ended)
        if removed:
            return JobState.removed, "removed by hybrid"
        if code is None:
            return JobState.finished, "exited (seen from another process)"
        if code == 0:
            return JobState.finished, None
        return JobState.failed, f"exit code {code}"

    def query(self, cluster: str | None = None, job_ids: Iterable[str] | None = None,
              history: bool = False) -> list[JobStatus]:
        """The recorded jobs (of ``cluster``, or these ids), each checked against its PID."""
        wanted = set(job_ids) if job_ids is not None else None
        out = []
        for path, record in self._records(cluster):
            job_id = record["job_id"]
            if wanted is not None and job_id not in wanted:
                continue
            state, reason = self._state(path, record)
            if not state.active and not history and wanted is None:
                continue
            out.append(JobStatus(job_id, state, reason, record.get("cluster"),
                                 record.get("pool"), record.get("scheduler")))
        return out

    def remove(self, job_ids: Iterable[str], timeout: float = 15) -> None:
        """SIGTERM each job's process group, SIGKILL it if still alive after ``timeout``."""
        wanted = set(job_ids)
        targets = []
        for path, record in self._records(None):
            if record["job_id"] in wanted:
                path.with_suffix(".removed").touch(mode=0o600)
                targets.append(record)
        leaders = {}
        for record in targets:
            if self._alive(record):
                _signal_group(record["pid"], signal.SIGTERM)
                with contextlib.suppress(psutil.Error):
                    leaders[psutil.Process(record["pid"])] = record["pid"]
        _, alive = psutil.wait_procs(list(leaders), timeout=timeout)
        for process in alive:
            _signal_group(leaders[process], signal.SIGKILL)
        psutil.wait_procs(alive, timeout=5)
        for record in targets:
            with self._lock:
                proc = self._procs.get(record["job_id"])
            if proc is not None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(5)
            if not self._alive(record):
                _remove_scratch(record)

    def _alive(self, record: dict[str, Any]) -> bool:
        with self._lock:
            proc = self._procs.get(record["job_id"])
        if proc is not None:
            return proc.poll() is None
        return record.get("start") is not None and _start_time(record["pid"]) == record["start"]


def _remove_scratch(record: dict[str, Any]) -> None:
    """Remove an ended job's temporary directory (one hybrid made: its name says so)."""
    scratch = record.get("scratch")
    if scratch and Path(scratch).name.startswith(f"hybrid-{record['job_id']}-"):
        shutil.rmtree(scratch, ignore_errors=True)


def listen_host(address: str) -> str | None:
    """The IP of a scheduler ``address`` when this machine can listen on it (a loopback
    address, or one of its own); ``None`` otherwise (a name, a proxy elsewhere)."""
    import ipaddress
    import socket

    from distributed.comm.addressing import get_address_host

    try:
        host = get_address_host(address)
        ip = ipaddress.ip_address(host)
    except ValueError:
        return None
    if ip.is_unspecified:
        return None
    family = socket.AF_INET6 if ip.version == 6 else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.bind((host, 0))
    except OSError:
        return None
    return host


def _signal_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass
