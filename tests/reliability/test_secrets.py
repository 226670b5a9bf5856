"""Secrets (issue 13, part 4): after a full gateway flow, no credential is anywhere it should
not be, and every key is private.

A REAL dev gateway; ``HTCGateway.new_cluster(pool="local")`` and ``pool="htcondor"`` (the
REAL HTCondor pool) with ``env=dict(os.environ)``, as users pass it, while this process holds
a JupyterHub API token, a database password and a variable whose value carries the gateway
password; ``scale``, a computation, ``shutdown``. Then:

* the environment each worker process really has holds none of the credentials (and does
  hold an ordinary variable, so the check can fail);
* every file hybrid wrote (the staging directory, while the jobs run), the files HTCondor
  spooled and the job's own directory on the execute side (found under the pool's chroot),
  the worker logs, the dev gateway's whole state directory (settings, database, logs,
  cluster directories) and the pools recorded in the scheduler's metadata: no credential
  anywhere (the gateway password only in its own 0600 file); keys and certificates 0600
  (no group or other bit on any file of the gateway's state) and owned by the user the job
  runs as, on the submit side the submitting user;
* the log records of this process (hybrid, distributed, dask_gateway, DEBUG and up) and the
  warning that names the dropped variables carry none of their values;
* after ``shutdown``: no job in the queue and no staging directory of the cluster (with its
  key copies) left.

A worker with a wrong certificate or a wrong SNI is refused by the gateway's proxy:
tests/gateway/test_dev_gateway.py (test_wrong_certificate_and_wrong_sni_are_refused) proves
it for a certificate not the cluster's and an SNI of no cluster; here, a worker holding one
cluster's own certificate that names ANOTHER running cluster of the same user in its SNI.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import secrets
import stat
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import dask
import pytest

from hybrid.gateway import scheduler_sni
from hybrid.gateway.client import METADATA_KEY, HTCGateway
from hybrid.gateway_server.dev import DevGateway, start_dev_gateway
from tests.gateway.helpers import (
    TEST_GATEWAY_SETTINGS,
    ExternalWorkers,
    wait_for,
    write_tls_files,
)
from tests.reliability._real import real_jobs
from tests.scheduler_workers import worker_names

pytestmark = [
    pytest.mark.gateway,
    pytest.mark.timeout(300),
    pytest.mark.filterwarnings(
        "ignore:Exception ignored in.*Gateway.__del__:pytest.PytestUnraisableExceptionWarning"),
]

#: A JupyterHub API token and a password in the user's environment.
TOKEN = "hybtok" + secrets.token_hex(16)
DB_PASSWORD = "hybpw" + secrets.token_hex(16)
#: An ordinary variable: it must reach the workers (so its absence would mean something).
ORDINARY = ("HYBRID_T_ORDINARY", "kept " + secrets.token_hex(4))


def _build() -> tuple[Any, Any, Any]:
    """Task functions, built here so cloudpickle ships them by value (no test import)."""

    def square(x: int) -> int:
        return x * x

    def environment() -> dict[str, str]:
        import os

        return dict(os.environ)

    def tls_files(dask_worker: Any) -> dict[str, Any]:
        """Where the worker runs, who it runs as, and its CA, certificate and key files."""
        import os

        security = dask_worker.security
        paths = {getattr(security, name) for name in ("tls_ca_file", "tls_worker_cert",
                                                       "tls_worker_key", "tls_client_cert",
                                                       "tls_client_key")}
        files = {}
        for path in sorted(p for p in paths if isinstance(p, str) and p):
            absolute = os.path.join(os.getcwd(), path)
            info = os.stat(absolute)
            files[absolute] = {"mode": info.st_mode & 0o7777, "uid": info.st_uid}
        return {"cwd": os.getcwd(), "uid": os.getuid(), "files": files}

    return square, environment, tls_files


square, environment, tls_files = _build()


@pytest.fixture(scope="module")
def dev() -> Iterator[DevGateway]:
    """A dev gateway of this module, started before any credential is in the environment."""
    gateway = start_dev_gateway(**TEST_GATEWAY_SETTINGS)
    try:
        yield gateway
    finally:
        gateway.stop()


def _files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file() and not p.is_symlink())


def _holding(paths: list[Path], needles: list[str]) -> list[str]:
    """``path: needle`` for every file that holds one of the needles."""
    found = []
    for path in paths:
        data = path.read_bytes()
        found += [f"{path}: {needle[:6]}..." for needle in needles if needle.encode() in data]
    return found


def _private(path: Path, uid: int) -> str | None:
    """What is wrong with a key or certificate file (``None``: 0600 and ``uid``'s)."""
    info = path.stat()
    if stat.S_IMODE(info.st_mode) != 0o600 or info.st_uid != uid:
        return f"{path}: mode {stat.S_IMODE(info.st_mode):o}, uid {info.st_uid} (not {uid})"
    return None


def _execute_side(path: str) -> Path:
    """A path the HTCondor job saw, as this host sees it (the pool runs in a chroot)."""
    chroot = os.environ.get("HYBRID_CONDOR_CHROOT", "")
    return Path(chroot + path) if chroot else Path(path)


def _spooled(cluster_ids: set[str]) -> list[Path]:
    """The files HTCondor's schedd spooled for these job clusters, and its job queue (the
    job ads as submitted)."""
    spool = _execute_side("/var/spool/condor")
    found = [p for p in _files(spool) if any(f"cluster{c}." in str(p) for c in cluster_ids)]
    assert found, f"no spooled file of clusters {cluster_ids} in {spool}"
    return [*found, spool / "job_queue.log"]


@dataclass
class Flow:
    """What one gateway flow showed, observed while its jobs ran and after ``shutdown``."""

    pool: str
    name: str
    credentials: list[str]
    #: Each worker process's environment.
    environments: list[dict[str, str]]
    #: Files written for the jobs that hold a credential (``path: needle``).
    holding: list[str]
    #: The key and certificate files found: (path, mode, uid, the uid it must have).
    keys: list[tuple[str, int, int, int]]
    #: The pools as the scheduler's metadata records them.
    metadata: str
    #: This process's log records and warnings during the flow.
    messages: list[str]
    #: Jobs of the cluster in the real queues, and its staging directories, after shutdown.
    left: list[str] = field(default_factory=list)


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@contextlib.contextmanager
def _recorded() -> Iterator[list[str]]:
    """Every log record (DEBUG and up) of hybrid, distributed and dask_gateway, and every
    warning, while the block runs."""
    handler = _Records()
    loggers = [logging.getLogger(n) for n in ("hybrid", "distributed", "dask_gateway")]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.addHandler(handler)
        logger.setLevel(logging.DEBUG)
    try:
        with warnings.catch_warnings(record=True) as warned:
            warnings.simplefilter("always")
            yield handler.messages
            handler.messages += [str(w.message) for w in warned]
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.removeHandler(handler)
            logger.setLevel(level)


def _observe(pool: str, dev: DevGateway, staging: Path) -> Flow:
    """new_cluster(pool=..., env=dict(os.environ)), scale(2), compute, look, shutdown."""
    credentials = [dev.password, TOKEN, DB_PASSWORD]
    gateway = dev.gateway(HTCGateway)
    name = None
    try:
        with dask.config.set({"hybrid.batch.staging-directory": str(staging)}), \
                _recorded() as messages:
            cluster = gateway.new_cluster(pool=pool, worker_memory=0.5, env=dict(os.environ))
            name = cluster.name
            cluster.scale(2)
            cluster.wait_for_workers(2, timeout=180, progress=False)
            client = cluster.get_client(set_as_default=False)
            assert client.gather(client.map(square, range(20))) == [x * x for x in range(20)]
            facts = client.run(tls_files)
            flow = Flow(pool, name, credentials, list(client.run(environment).values()), [],
                        [], json.dumps(client.get_metadata(METADATA_KEY)), messages)
            written = _files(staging)
            assert {p.name for p in written} >= {"ca.pem", "cert.pem", "key.pem"}
            owners = {p: os.getuid() for p in written}
            clusters = {s.job_id.split(".")[0] for s in cluster.jobs()}
            if pool == "htcondor":  # the job's directory and the spool: the job user's
                job_user = {fact["uid"] for fact in facts.values()}.pop()
                for path in [*(p for fact in facts.values()
                               for p in _files(_execute_side(fact["cwd"]))),
                             *_spooled(clusters)]:
                    owners[path] = job_user
            flow.holding = _holding(list(owners), credentials)
            flow.keys = [(str(p), stat.S_IMODE(p.stat().st_mode), p.stat().st_uid, uid)
                         for p, uid in owners.items() if p.suffix == ".pem"]
            for fact in facts.values():  # as the worker itself sees its files
                flow.keys += [(path, info["mode"], info["uid"], fact["uid"])
                              for path, info in fact["files"].items()]
            client.close()
            cluster.shutdown()
        flow.left = real_jobs(name) + [str(p) for p in staging.glob(f"{name}-*")]
        if pool == "htcondor":  # the spooled copies go with the jobs, when they leave
            spool = _execute_side("/var/spool/condor")
            wait_for(lambda: not [p for c in clusters for p in spool.glob(f"*/*/cluster{c}.*")],
                     timeout=60, message="the spooled files removed with the jobs")
        return flow
    finally:
        if name is not None and name in {c.name for c in gateway.list_clusters()}:
            gateway.stop_cluster(name)
        gateway.close()


#: Every flow asks the real queues (HTCondor and Slurm) for leftovers.
_ASKS_THE_QUEUES = (pytest.mark.htcondor, pytest.mark.slurm)


@pytest.fixture(scope="module", params=[pytest.param("local", marks=_ASKS_THE_QUEUES),
                                        pytest.param("htcondor", marks=_ASKS_THE_QUEUES)])
def flow(request: pytest.FixtureRequest, dev: DevGateway,
         tmp_path_factory: pytest.TempPathFactory) -> Iterator[Flow]:
    """One full gateway flow on the pool, with credentials in this process's environment."""
    request.getfixturevalue("htcondor_pool")  # the queues are asked for leftovers
    request.getfixturevalue("slurm_cluster")
    staging = tmp_path_factory.mktemp(f"secrets-{request.param}") / "staging"
    with pytest.MonkeyPatch.context() as monkeypatch:
        monkeypatch.setenv("JUPYTERHUB_API_TOKEN", TOKEN)
        monkeypatch.setenv("HYBRID_T_DB_PASSWORD", DB_PASSWORD)
        monkeypatch.setenv("HYBRID_T_INNOCENT", f"user:{dev.password}@db")
        monkeypatch.setenv(*ORDINARY)
        yield _observe(request.param, dev, staging)


DROPPED = ("JUPYTERHUB_API_TOKEN", "HYBRID_T_DB_PASSWORD", "HYBRID_T_INNOCENT")


def test_the_jobs_environment_holds_no_credential(flow: Flow,
                                                  request: pytest.FixtureRequest) -> None:
    assert len(flow.environments) == 2
    for variables in flow.environments:
        assert variables.get(ORDINARY[0]) == ORDINARY[1]  # the user's env does arrive
        assert not set(DROPPED) & set(variables)
        assert not any(c in value for value in variables.values() for c in flow.credentials)


def test_no_file_written_for_the_jobs_holds_a_credential(flow: Flow) -> None:
    assert flow.holding == []
    assert not any(c in flow.metadata for c in flow.credentials)


def test_keys_and_certificates_are_0600_and_owned_by_the_users_of_the_job(flow: Flow) -> None:
    assert len(flow.keys) >= 3
    assert [(path, mode, uid) for path, mode, uid, owner in flow.keys
            if mode != 0o600 or uid != owner] == []


def test_logs_and_warnings_name_the_dropped_variables_never_their_values(flow: Flow) -> None:
    assert not any(c in message for message in flow.messages for c in flow.credentials)
    dropped = [m for m in flow.messages if "carry credentials" in m]
    assert len(dropped) == 1 and all(name in dropped[0] for name in DROPPED)


def test_nothing_of_the_cluster_is_left_after_shutdown(flow: Flow) -> None:
    assert flow.left == []


def _readable_by_others(path: Path, root: Path) -> bool:
    """Whether a user other than the owner can read ``path``: every directory from ``root``
    down lets them through, and the file lets them read. (dask-gateway-server creates its
    clusters' log files 0755, inside 0700 directories.)"""
    inside = reversed(path.relative_to(root).parents[:-1])
    for folder in [root, *(root / part for part in inside)]:
        if not folder.stat().st_mode & 0o011:
            return False
    return bool(path.stat().st_mode & 0o044)


def test_the_dev_gateways_state_is_private_and_holds_no_credential(
        dev: DevGateway, flow: Flow) -> None:
    state = _files(dev.state_dir)
    assert {p.name for p in state} >= {"password", "gateway.log", "gateway.sqlite"}
    assert _holding([p for p in state if p.name != "password"], flow.credentials) == []
    assert stat.S_IMODE(dev.state_dir.stat().st_mode) == 0o700
    assert [str(p) for p in state if _readable_by_others(p, dev.state_dir)
            or p.stat().st_uid != os.getuid()] == []
    for name in ("password", "db-key", "hybrid-gateway.yaml"):
        assert stat.S_IMODE((dev.state_dir / name).stat().st_mode) == 0o600


def test_a_worker_with_one_clusters_certificate_cannot_join_another(
        dev: DevGateway, tmp_path: Path) -> None:
    """Two clusters of one user: cluster A's own certificate, with the SNI of cluster B."""
    external = ExternalWorkers(tmp_path)
    gateway = dev.gateway()
    try:
        first = gateway.new_cluster()
        second = gateway.new_cluster()
        cert, key = write_tls_files(first.security, tmp_path / "first")
        address = dev.worker_scheduler_address
        crossing = external.start(address, first.name, cert, key, "crossing",
                                  sni=scheduler_sni(second.name), death_timeout=5)
        external.start(address, first.name, cert, key, "own")
        client = first.get_client()
        other = second.get_client()
        seen: set[str] = set()

        def crossing_ended() -> bool:
            seen.update(worker_names(client) | worker_names(other))
            return crossing.poll() is not None and "own" in seen

        wait_for(crossing_ended, timeout=60, interval=0.3, message="the crossing worker ending")
        seen.update(worker_names(client) | worker_names(other))
        assert "crossing" not in seen and "own" in worker_names(client)
        assert crossing.returncode != 0
        assert "Registered to:" not in external.log("crossing")
        client.close()
        other.close()
        first.shutdown()
        second.shutdown()
    finally:
        external.close()
        for report in gateway.list_clusters():
            gateway.stop_cluster(report.name)
        gateway.close()
