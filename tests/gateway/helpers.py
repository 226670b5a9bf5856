"""Helpers for tests that run a real dev gateway: external workers, log reading, waiting.

Importable by other test folders (``from tests.gateway.helpers import ...``).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from hybrid.gateway import scheduler_sni

#: Settings of every test gateway: schedulers beat each second (external workers must survive
#: many beats), and a scheduler held up by a busy machine keeps its cluster (the stock timeout,
#: two periods, culled one mid-test on CI; a dead scheduler is still seen by its PID).
TEST_GATEWAY_SETTINGS: dict[str, Any] = {"heartbeat_period": 1, "heartbeat_timeout": 60}


def write_tls_files(security: Any, directory: Path, prefix: str = "dask") -> tuple[Path, Path]:
    """Write a cluster's ``security.tls_cert`` / ``tls_key`` 0600; return (cert, key) paths."""
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    paths = []
    for suffix, data in (("crt", security.tls_cert), ("pem", security.tls_key)):
        path = directory / f"{prefix}.{suffix}"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, data.encode() if isinstance(data, str) else data)
        finally:
            os.close(fd)
        paths.append(path)
    return paths[0], paths[1]


class ExternalWorkers:
    """``dask worker`` processes started the way a batch job starts them; all stopped at close."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.processes: dict[str, subprocess.Popen] = {}

    def start(self, scheduler_address: str, cluster_name: str, cert: Path, key: Path, name: str,
              *, sni: str | None = None, death_timeout: int = 60, nthreads: int = 1,
              memory_limit: str | None = None) -> subprocess.Popen:
        """``python -m dask worker tls://PROXY --scheduler-sni daskgateway-NAME --no-nanny ...``."""
        argv = [
            sys.executable, "-m", "dask", "worker", scheduler_address,
            "--scheduler-sni", sni if sni is not None else scheduler_sni(cluster_name),
            "--no-nanny", "--tls-ca-file", str(cert), "--tls-cert", str(cert),
            "--tls-key", str(key), "--name", name, "--nthreads", str(nthreads),
            "--death-timeout", str(death_timeout),
        ]
        if memory_limit is not None:
            argv += ["--memory-limit", memory_limit]
        log = open(self.log_dir / f"{name}.log", "wb")  # the child keeps its own descriptor
        try:
            process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                       stdin=subprocess.DEVNULL, start_new_session=True)
        finally:
            log.close()
        self.processes[name] = process
        return process

    def log(self, name: str) -> str:
        """A worker's output so far."""
        return (self.log_dir / f"{name}.log").read_text(errors="replace")

    def close(self, grace: float = 3) -> None:
        """Stop every worker started here (its own process group), SIGKILL after ``grace`` s.

        (``dask worker --no-nanny`` can hang for good on a SIGTERM that arrives while it is
        already closing, e.g. after its cluster was shut down.)
        """
        for process in self.processes.values():
            if process.poll() is None:
                _signal_group(process.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        for process in self.processes.values():
            try:
                process.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                _signal_group(process.pid, signal.SIGKILL)
                process.wait(5)


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        pass


def wait_for(predicate: Callable[[], Any], timeout: float, interval: float = 0.2,
             message: str = "condition") -> Any:
    """Poll ``predicate`` until truthy; its value, or AssertionError after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{message} not reached within {timeout:g} s")
        time.sleep(interval)


_HEARTBEAT = re.compile(r"Cluster (?P<name>[0-9a-f]+) heartbeat \[count: (?P<count>\d+), "
                        r"n_active: (?P<active>\d+)")


def scheduler_log(state_dir: Path, cluster_name: str) -> str:
    """A dev gateway cluster's scheduler log ("" once the cluster directory is gone)."""
    path = state_dir / "clusters" / cluster_name / "logs" / "scheduler.log"
    try:
        return path.read_text(errors="replace")
    except FileNotFoundError:
        return ""


def heartbeats(log_text: str, cluster_name: str) -> list[dict[str, int]]:
    """The gateway's heartbeat log lines for a cluster, as ``{"count", "active"}`` dicts."""
    return [{"count": int(m["count"]), "active": int(m["active"])}
            for m in _HEARTBEAT.finditer(log_text) if m["name"] == cluster_name]


async def until(predicate: Callable[[], Any], timeout: float = 30,
                message: str = "condition",
                state: Callable[[], Any] | None = None) -> None:
    """In the event loop: wait until ``predicate()`` is true, or fail after ``timeout``.

    ``state()``, if given, is shown in the failure: what the system looked like then.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():
        if loop.time() > deadline:
            seen = "" if state is None else f"; state then: {state()!r}"
            raise AssertionError(f"{message} not reached within {timeout:g} s{seen}")
        await asyncio.sleep(0.05)


@contextlib.contextmanager
def gateway_client(dev: Any) -> Iterator[Any]:
    """A ``dask_gateway.Gateway`` of a dev gateway; its clusters are stopped at exit."""
    client = dev.gateway()
    try:
        yield client
    finally:
        for report in client.list_clusters():
            client.stop_cluster(report.name)
        client.close()
