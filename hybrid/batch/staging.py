"""A pool's private staging directory: its job files and the TLS copies jobs read.

Created 0700, files 0600 (:func:`write_private`); each directory records who made it, so
``hybrid gc`` can remove it once its jobs are gone, even when no process closed it.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import time
from pathlib import Path
from typing import Any

from hybrid.batch.jobs import WorkerJob, tag_prefix
from hybrid.config import staging_root
from hybrid.worker import TLSFiles, read_pem

__all__ = ["STAGING_RECORD", "Staging", "remove_staging_of", "staging_directories",
           "staging_root", "write_private"]

STAGING_RECORD = "hybrid-staging.json"


def write_private(path: Path, data: str | bytes, mode: int = 0o600) -> Path:
    """Write a file that only its owner can read: created with ``mode`` (never wider).

    Ours rather than ``Path.write_text`` + ``chmod`` (readable by others in between) or
    ``tempfile.mkstemp`` (a name of its own): the file is private from the moment it exists,
    under its own name, and ``fchmod`` narrows a file that existed with a wider mode.
    """
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        os.fchmod(fd, mode)
        os.write(fd, data.encode() if isinstance(data, str) else data)
    finally:
        os.close(fd)
    return path


class Staging:
    """A pool's private staging directory (0700): job files and the TLS copies jobs read.

    It records who made it (``hybrid-staging.json``: cluster, pool, system, scheduler), so
    ``hybrid gc`` can remove it once its jobs are gone, even when no process closed it.
    """

    def __init__(self, path: Path):
        self.path = path

    @classmethod
    def create(cls, job: WorkerJob) -> Staging:
        """A new directory ``<cluster>-<pool>-<random>`` under :func:`staging_root`."""
        root = staging_root()
        root.mkdir(parents=True, exist_ok=True, mode=0o700)
        path = root / f"{job.cluster}-{job.pool}-{secrets.token_hex(4)}"
        path.mkdir(mode=0o700)
        staging = cls(path)
        try:
            write_private(path / STAGING_RECORD, json.dumps({
                "cluster": job.cluster, "pool": job.pool, "system": job.spec.system,
                "tag": tag_prefix(), "scheduler": job.connection.scheduler_address,
                "created": time.time()}))
            staging.stage_tls(job.connection.tls)
        except BaseException:
            staging.remove()
            raise
        return staging

    @staticmethod
    def would_be(job: WorkerJob) -> Path:
        """The kind of path :meth:`create` makes, for showing scripts (nothing is made)."""
        return staging_root() / f"{job.cluster}-{job.pool}-XXXXXXXX"

    def stage_tls(self, tls: TLSFiles | None) -> None:
        """Write the cluster's TLS material in, 0600."""
        if tls is None:
            return
        for name, source in (("ca.pem", tls.ca), ("cert.pem", tls.cert), ("key.pem", tls.key)):
            write_private(self.path / name, read_pem(source))

    def remove(self) -> None:
        """Delete the directory and everything in it."""
        shutil.rmtree(self.path, ignore_errors=True)

    @staticmethod
    def record(path: Path) -> dict[str, Any] | None:
        """What a staging directory says about itself (``None`` if unreadable)."""
        try:
            return json.loads((path / STAGING_RECORD).read_text())
        except (OSError, ValueError):
            return None


def staging_directories(cluster: str | None = None) -> list[Path]:
    """Staging directories under :func:`staging_root` (of one ``cluster``, if given)."""
    root = staging_root()
    if not root.is_dir():
        return []
    pattern = f"{cluster}-*-*" if cluster else "*"
    return sorted(p for p in root.glob(pattern) if p.is_dir())


def remove_staging_of(cluster: str) -> list[Path]:
    """Delete every staging directory of ``cluster`` (after its jobs are gone)."""
    removed = []
    for path in staging_directories(cluster):
        record = Staging.record(path)
        if record is None or record.get("cluster") == cluster:
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed
