"""``hybrid doctor``: what a submit node or notebook needs before it starts batch workers.

Every check is a function that returns a :class:`CheckResult` (ok, warn or fail, one line
of what was seen, one line of how to fix it); :func:`run_doctor` runs those that the given
options make possible. No check raises for what it finds; bad options raise
:class:`~hybrid.errors.ConfigurationError` before any check runs.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import socket
import ssl
import sys
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

from distributed.comm.addressing import parse_address, parse_host_port

from hybrid import config
from hybrid.checks import CheckResult, Status, fail, ok, warn
from hybrid.errors import ConfigurationError, ToolMissing
from hybrid.fields import Name, PortRange, count, port_range_bounds, validate_value
from hybrid.gateway import scheduler_sni

DEFAULT_WARN_DAYS = 14
DEFAULT_TIMEOUT = 5.0
#: The least the batch system's check waits (a busy schedd answers slowly).
BATCH_CHECK_TIMEOUT = 20.0


# --------------------------------------------------------------------------- addresses


def parse_gateway_address(address: str, field: str = "--gateway-address") -> str:
    """``http(s)://host[:port][/prefix]`` without a trailing slash (``field``: where it came
    from, for the error)."""
    parsed = urlparse(str(address))
    try:
        port_ok = parsed.port is None or parsed.port > 0
    except ValueError:  # beyond 65535
        port_ok = False
    if parsed.scheme not in ("http", "https") or not parsed.hostname or not port_ok:
        raise ConfigurationError(field, address, "an HTTP address like "
                                 "http://gateway.example.org:8000 (port 1-65535)")
    return str(address).rstrip("/")


def parse_proxy_address(address: str, field: str = "--proxy-address") -> tuple[str, int]:
    """``host:port``, ``tls://host:port`` or ``gateway://host:port`` -> ``(host, port)``."""
    text = str(address)
    try:
        scheme, location = parse_address(text if "://" in text else f"tcp://{text}")
        host, port = parse_host_port(location)
    except ValueError:
        scheme, host, port = "", "", 0
    if scheme not in ("tcp", "tls", "gateway") or not host or not 1 <= port <= 65535:
        raise ConfigurationError(field, address, "an address with a port, like "
                                 "gateway.example.org:8786 or tls://HOST:8786")
    return host, port


# --------------------------------------------------------------------------- network checks


def check_gateway(address: str, timeout: float = DEFAULT_TIMEOUT) -> CheckResult:
    """The gateway's API answers ``GET /api/health`` with status pass."""
    name = "gateway"
    base = parse_gateway_address(address)
    url = f"{base}/api/health"
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            body = json.loads(response.read().decode() or "{}")
    except urllib.error.HTTPError as error:
        if error.code == 503:
            return fail(name, f"{url} answered HTTP 503: the gateway says it is unhealthy",
                         "Look at the gateway server's log.")
        return fail(name, f"{url} answered HTTP {error.code}: not a dask-gateway API there",
                     "Check --gateway-address (and its path prefix, e.g. /services/dask-gateway).")
    except (urllib.error.URLError, OSError, TimeoutError) as error:
        reason = getattr(error, "reason", error)
        return fail(name, f"nothing answers at {base}: {reason}",
                     "Start the gateway or fix --gateway-address; check the firewall towards "
                     "the gateway's HTTP port.")
    except ValueError:
        return fail(name, f"{url} answered, but not with JSON: not a dask-gateway API",
                     "Check --gateway-address.")
    if body.get("status") != "pass":
        return fail(name, f"{url} says the gateway is unhealthy: {body}",
                     "Look at the gateway server's log.")
    version = "?"
    try:
        with urllib.request.urlopen(f"{base}/api/version", timeout=timeout) as response:
            version = json.loads(response.read().decode()).get("version", "?")
    except (OSError, ValueError):
        pass
    return ok(name, f"dask-gateway {version} answers at {base}")


def check_proxy_port(address: str, timeout: float = DEFAULT_TIMEOUT) -> CheckResult:
    """Something accepts TCP connections at the proxy (ingress) address."""
    name = "proxy port"
    host, port = parse_proxy_address(address)
    try:
        with socket.create_connection((host, port), timeout=timeout):
            pass
    except TimeoutError:
        return fail(name, f"{host}:{port} did not answer within {timeout:g} s (filtered?)",
                     f"Open TCP {port} from this node to the ingress (see `hybrid admin ports`).")
    except OSError as error:
        reason = error.strerror or error
        return fail(name, f"proxy down: cannot connect to {host}:{port} ({reason})",
                     "Start the gateway's proxy/ingress, or fix --proxy-address.")
    return ok(name, f"{host}:{port} accepts TCP connections")


def check_tls_sni(proxy_address: str, cluster_name: str, cert: str | Path,
                  key: str | Path | None = None,
                  timeout: float = DEFAULT_TIMEOUT) -> CheckResult:
    """A TLS handshake through the proxy with SNI ``daskgateway-<cluster>`` succeeds.

    The cluster's certificate is the CA: the scheduler's certificate must be signed by it.
    With ``key`` the client presents the certificate as a worker does.
    """
    name = "TLS by SNI"
    host, port = parse_proxy_address(proxy_address)
    sni = scheduler_sni(validate_value(Name, cluster_name, "--cluster-name"))
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False  # dask checks the chain, not the name
    try:
        context.load_verify_locations(cafile=str(cert))
        if key is not None:
            context.load_cert_chain(str(cert), str(key))
    except (OSError, ssl.SSLError) as error:
        return fail(name, f"cannot load {cert}{' / ' + str(key) if key else ''} for TLS: {error}",
                     "Give --cert (and --key) the cluster's certificate and key files (PEM).")
    try:
        with socket.create_connection((host, port), timeout=timeout) as raw:
            with context.wrap_socket(raw, server_hostname=sni) as tls:
                version = tls.version()
    except ssl.SSLCertVerificationError as error:
        if error.verify_code == 10:  # X509_V_ERR_CERT_HAS_EXPIRED
            return fail(name, f"the certificate has expired ({error.verify_message})",
                         "Start a new cluster: its certificate is made fresh.")
        subject = _presented_subject(host, port, sni, timeout)
        if subject and "TRAEFIK DEFAULT CERT" in subject:
            return fail(name, f"the ingress has no route for SNI {sni}: Traefik answered "
                               f"with its own certificate ({subject})",
                         "Route daskgateway-* with TLS passthrough (`hybrid admin ingress`); "
                         "check --cluster-name.")
        return fail(name, f"wrong certificate: the scheduler behind {sni} is not signed by "
                           f"{cert} ({error.verify_message}; it presented {subject or '?'})",
                     "Use the certificate of THIS cluster (cluster.security.tls_cert).")
    except (ssl.SSLEOFError, ConnectionResetError, BrokenPipeError) as error:
        return fail(name, f"the proxy closed the connection for SNI {sni}: no cluster of that "
                           f"name is routed there ({error.__class__.__name__})",
                     "Check --cluster-name (a running cluster), and that the ingress routes "
                     "daskgateway-* (`hybrid admin ingress`).")
    except ssl.SSLError as error:
        return fail(name, f"TLS handshake with {sni} failed: {error}",
                     "Check that --proxy-address is the gateway's TLS proxy, not its HTTP port.")
    except TimeoutError:
        return fail(name, f"TLS handshake with {sni} did not finish within {timeout:g} s",
                     "Check that --proxy-address is the gateway's TLS proxy port.")
    except OSError as error:
        return fail(name, f"cannot connect to {host}:{port} ({error.strerror or error})",
                     "Start the proxy/ingress, or fix --proxy-address.")
    return ok(name, f"{version} handshake with {sni} at {host}:{port}, scheduler certificate "
                     "signed by the cluster's CA")


def _presented_subject(host: str, port: int, sni: str, timeout: float) -> str | None:
    """The subject of the certificate the server presents for ``sni`` (not verified)."""
    from cryptography import x509

    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    try:
        with socket.create_connection((host, port), timeout=timeout) as raw:
            with context.wrap_socket(raw, server_hostname=sni) as tls:
                der = tls.getpeercert(binary_form=True)
        return x509.load_der_x509_certificate(der).subject.rfc4514_string() if der else None
    except (OSError, ValueError):
        return None


# --------------------------------------------------------------------------- certificate


def check_certificate(cert: str | Path, key: str | Path | None = None,
                      warn_days: int = DEFAULT_WARN_DAYS,
                      now: dt.datetime | None = None) -> CheckResult:
    """The certificate parses, is valid now, not about to expire, and matches ``key``."""
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization

    name = "certificate"
    try:
        data = Path(cert).read_bytes()
    except OSError as error:
        return fail(name, f"cannot read {cert}: {error.strerror}",
                     "Write the cluster's certificate (cluster.security.tls_cert) to --cert.")
    try:
        certificate = x509.load_pem_x509_certificate(data)
    except ValueError:
        return fail(name, f"{cert} is not a PEM certificate",
                     "Give --cert the cluster's certificate in PEM form.")
    now = now or dt.datetime.now(dt.timezone.utc)
    not_after = certificate.not_valid_after_utc
    not_before = certificate.not_valid_before_utc
    if not_after <= now:
        return fail(name, f"certificate expired on {not_after:%Y-%m-%d %H:%M} UTC",
                     "Start a new cluster (its certificate is made fresh) and use its files.")
    if not_before > now:
        return fail(name, f"certificate not valid before {not_before:%Y-%m-%d %H:%M} UTC",
                     "Check this node's clock (NTP).")
    if key is not None:
        try:
            private_key = serialization.load_pem_private_key(Path(key).read_bytes(), None)
        except (OSError, ValueError, TypeError) as error:
            return fail(name, f"cannot load the key {key}: {error}",
                         "Give --key the cluster's unencrypted PEM key "
                         "(cluster.security.tls_key).")
        public = serialization.PublicFormat.SubjectPublicKeyInfo
        encoding = serialization.Encoding.DER
        if (private_key.public_key().public_bytes(encoding, public)
                != certificate.public_key().public_bytes(encoding, public)):
            return fail(name, f"the key {key} does not belong to the certificate {cert}",
                         "Use the certificate and key of the same cluster.")
    days_left = (not_after - now).total_seconds() / 86400
    if days_left < warn_days:
        return warn(name, f"certificate expires in {days_left:.1f} days "
                           f"({not_after:%Y-%m-%d} UTC)",
                     "Plan a new cluster before then: running workers lose their scheduler.")
    return ok(name, f"valid until {not_after:%Y-%m-%d} UTC ({days_left:.0f} days)")


# --------------------------------------------------------------------------- security


def check_scheduler_exposure() -> CheckResult:
    """Would a scheduler started with this configuration listen beyond loopback without
    TLS? (``hybrid.scheduler.tls``, ``host``, ``dashboard-address``, and the directory the
    clusters' credentials are stored in.)"""
    from hybrid.security import credentials_root, is_loopback_host

    name = "scheduler security"
    try:
        tls = config.get("scheduler.tls", True)
        host = config.get("scheduler.host", "") or ""
        dashboard = config.get("scheduler.dashboard-address", None)
    except ConfigurationError as error:
        return fail(name, str(error), error.fix or "Fix the setting it names.")
    where = f"on {host}" if host else "on every interface"
    root = credentials_root()
    if root.exists():
        info = root.lstat()
        if info.st_uid != os.geteuid() or info.st_mode & 0o077 or not root.is_dir():
            return fail(name, f"the clusters' credentials directory {root} is not yours "
                               f"alone (mode {info.st_mode & 0o777:04o}, uid {info.st_uid})",
                         f"chmod 700 {root}, or set hybrid.scheduler.credentials-directory "
                         "to a directory of your own.")
    if not tls and not is_loopback_host(host):
        return fail(name, f"hybrid.scheduler.tls is false: a cluster's scheduler would listen "
                           f"in plain TCP {where}, and anyone who reaches it runs code as you",
                     "Remove hybrid.scheduler.tls: false (TLS with a certificate per cluster "
                     "is the default), or set hybrid.scheduler.host: 127.0.0.1.")
    if not tls:
        return warn(name, f"plain TCP {where} (hybrid.scheduler.tls: false): other users of "
                           "this machine reach loopback too",
                     "Remove hybrid.scheduler.tls: false unless you are this machine's only "
                     "user.")
    dash = "no dashboard" if dashboard is None else f"the dashboard on {dashboard}"
    if dashboard is not None and not is_loopback_host(parse_host_port(str(dashboard))[0]):
        return warn(name, f"TLS with client certificates {where}; {dash}: every host that "
                           "reaches it reads the dashboard (over TLS, no login)",
                     "Set hybrid.scheduler.dashboard-address: 127.0.0.1:0 and reach it through "
                     "an SSH tunnel, unless that is what you want.")
    return ok(name, f"TLS with client certificates {where} (a CA per cluster); {dash}")


def check_scheduler_access(address: str, timeout: float = DEFAULT_TIMEOUT) -> CheckResult:
    """Does the scheduler at ``address`` refuse someone without its credentials? (Tries as
    an outsider would: plain TCP, TLS without a certificate, TLS with another CA's.)"""
    from hybrid.fields import Address
    from hybrid.security import outsider_attempts

    name = "scheduler access"
    address = validate_value(Address, address, "--scheduler")
    outcome = outsider_attempts(address, timeout)
    answered = [attempt for attempt, refusal in outcome.items() if refusal is None]
    if answered:
        return fail(name, f"{address} answered a client without credentials "
                           f"({', '.join(answered)}): anyone who reaches it runs code there",
                     "Start the cluster with TLS (the default; not security=False), or let it "
                     "listen on 127.0.0.1 only.")
    return ok(name, f"{address} refused every client without its credentials "
                     f"({', '.join(outcome)})")


# --------------------------------------------------------------------------- batch systems

def check_batch_system(system: str, timeout: float = BATCH_CHECK_TIMEOUT) -> CheckResult:
    """The batch system's tools or bindings are present and answer (the system checks
    itself: :meth:`hybrid.batch.BatchSystem.check`)."""
    from hybrid.batch import SYSTEMS, get_system

    if str(system).lower() not in SYSTEMS:
        raise ConfigurationError("--system", system, ", ".join(sorted(SYSTEMS)))
    try:
        found = get_system(str(system).lower())
    except ToolMissing as error:  # its optional extra is not installed: one failed check
        message, _, fix = str(error).partition(": pip install ")
        return fail(f"batch system {str(system).lower()}", message,
                    f"pip install {fix}" if fix else "Install the system's Python package.")
    return found.check(timeout)


def check_settings() -> CheckResult:
    """No key under ``hybrid.`` that hybrid does not know (Dask ignores a typo silently)."""
    name = "settings"
    unknown = config.unknown_settings()
    if not unknown:
        return ok(name, "every hybrid.* key set is one hybrid reads")
    said = "; ".join(f"{key} (did you mean {close}?)" if close else key
                     for key, close in unknown)
    return warn(name, f"{len(unknown)} key(s) hybrid does not read: {said}",
                f"Fix or remove them in {config.config_directory() / 'hybrid.yaml'} (or the "
                "DASK_HYBRID__... variables); until then their defaults apply.")


def check_pool_settings(system: str) -> CheckResult:
    """The pool a ``hybrid render --system`` would build from this node's settings is
    valid (the system's section, ``hybrid.worker.*``), and which python its workers run."""
    from hybrid.pools import PoolSpec
    from hybrid.worker import worker_python

    name = f"pool settings for {system}"
    try:
        spec = PoolSpec.build("doctor", system)
    except ConfigurationError as error:
        return fail(name, str(error), "Fix the setting it names in hybrid.yaml (or its "
                                      "DASK_HYBRID__... variable): every pool would fail so.")
    python = worker_python(spec)
    runs = (python if python is not None else
            "the python3 its job finds on PATH after its prologue (set python to choose)")
    return ok(name, f"hybrid.batch.{system} and hybrid.worker.* are valid; workers run {runs}")


# --------------------------------------------------------------------------- local node


def check_port_range(port_range: str | tuple[int, int], field: str = "hybrid.worker.port-range",
                     workers_per_node: int = 1) -> CheckResult:
    """Every port of the range can be bound here; at least ``workers_per_node`` are free."""
    name = f"ports {field}"
    ports = (port_range if isinstance(port_range, tuple)
             else None if port_range is None
             else port_range_bounds(validate_value(PortRange, port_range, field)))
    if ports is None:
        return warn(name, "no range set: workers listen on random ports",
                     f"Set {field} so the firewall can open a fixed range.")
    first, last = ports
    busy = []
    for port in range(first, last + 1):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as tornado binds
            try:
                probe.bind(("0.0.0.0", port))
            except OSError:
                busy.append(port)
    total = last - first + 1
    free = total - len(busy)
    shown = ", ".join(map(str, busy[:5])) + (" ..." if len(busy) > 5 else "")
    if free < workers_per_node:
        return fail(name, f"busy port range: {len(busy)} of {total} ports in use ({shown}); "
                           f"{free} free for {workers_per_node} worker(s)",
                     f"Stop what holds them (ss -ltnp) or move {field} to a free range.")
    if busy:
        return warn(name, f"{len(busy)} of {total} ports in use ({shown}); {free} free",
                     f"Enough for {workers_per_node} worker(s); free them or move {field}.")
    return ok(name, f"all {total} ports {first}-{last} free")


def check_worker_environment(container_image: str | None = None,
                             pixi_project: str | None = None,
                             conda_env: str | None = None) -> CheckResult:
    """The worker environment exists: an image file, a pixi project, a conda env."""
    name = "worker environment"
    seen = []
    if container_image:
        if "://" in container_image:
            seen.append(f"image {container_image} (remote: pulled by the job)")
        else:
            image = Path(container_image)
            if not image.exists():
                return fail(name, f"container image {image} does not exist",
                             "Build or copy the image there (apptainer build), or fix "
                             "hybrid.worker.container.image.")
            if image.is_file() and not os.access(image, os.R_OK):
                return fail(name, f"container image {image} is not readable",
                             "chmod a+r the image (jobs may run as another user).")
            seen.append(f"image {image}")
    if pixi_project:
        project = Path(pixi_project)
        if not (project / "pixi.toml").is_file():
            return fail(name, f"no pixi.toml in {project}",
                         "Point --pixi-project at the directory holding pixi.toml (pixi init).")
        if not (project / ".pixi" / "envs").is_dir():
            return warn(name, f"pixi project {project} is not installed (no .pixi/envs)",
                         f"Run `pixi install --manifest-path {project / 'pixi.toml'}` once.")
        seen.append(f"pixi project {project}")
    if conda_env:
        env = Path(conda_env)
        if not (env / "conda-meta").is_dir():
            return fail(name, f"{env} is not a conda environment (no conda-meta/)",
                         "Create it (conda create -p ENV python distributed) or fix --conda-env.")
        if not (env / "bin" / "python").exists():
            return fail(name, f"conda environment {env} has no bin/python",
                         "Install python and distributed into it.")
        seen.append(f"conda env {env}")
    if not seen:
        python = config.get("worker.python", None) or sys.executable
        return ok(name, f"no image, pixi project or conda env given: workers run {python}")
    return ok(name, "; ".join(seen) + " present")


def check_gpu_sharing() -> CheckResult:
    """Whether GPU pools' jobs on this node can share a GPU under CUDA MPS."""
    from hybrid.gpusharing import MPS_TASKS_PER_GPU, detect_gpus, mps_status

    name = "GPU sharing (CUDA MPS)"
    found, seen = mps_status()
    if found:
        return ok(name, f"{seen}: GPU jobs here start an MPS daemon of their own and run "
                        f"{MPS_TASKS_PER_GPU} GPU tasks at once per GPU (gpu_sharing=None)")
    if detect_gpus():
        return warn(name, f"{seen}, but this node has GPUs: GPU jobs here run one GPU task "
                          "at a time per GPU (time-sliced tasks run slower together)",
                    "Install the NVIDIA driver's utilities (nvidia-cuda-mps-control) or put "
                    "them on PATH in the pool's job_script_prologue.")
    return ok(name, f"{seen} (no GPU here; execute nodes decide for themselves)")


# --------------------------------------------------------------------------- all together


@dataclass(frozen=True)
class DoctorOptions:
    """What ``hybrid doctor`` was told; checks whose inputs are missing do not run."""

    gateway_address: str | None = None
    proxy_address: str | None = None
    cluster_name: str | None = None
    cert: str | None = None
    key: str | None = None
    system: str | None = None
    scheduler: str | None = None
    container_image: str | None = None
    pixi_project: str | None = None
    conda_env: str | None = None
    workers_per_node: int = 1
    warn_days: int = DEFAULT_WARN_DAYS
    timeout: float = DEFAULT_TIMEOUT

    def checked(self) -> DoctorOptions:
        """Raise :class:`ConfigurationError` for the first bad option; nothing has run yet."""
        if self.gateway_address:
            parse_gateway_address(self.gateway_address)
        if self.proxy_address:
            parse_proxy_address(self.proxy_address)
        if self.cluster_name is not None:
            validate_value(Name, self.cluster_name, "--cluster-name")
            if not (self.proxy_address and self.cert):
                raise ConfigurationError(
                    "--cluster-name", self.cluster_name, "--proxy-address and --cert with it",
                    fix="The TLS check needs where to connect and the cluster's certificate.")
        if self.scheduler is not None:
            from hybrid.fields import Address

            validate_value(Address, self.scheduler, "--scheduler")
        if self.key and not self.cert:
            raise ConfigurationError("--key", self.key, "--cert with it")
        if self.system is not None:
            from hybrid.batch import SYSTEMS

            if str(self.system).lower() not in SYSTEMS:
                raise ConfigurationError("--system", self.system, ", ".join(sorted(SYSTEMS)))
        validate_value(count(1), self.workers_per_node, "--workers-per-node")
        validate_value(count(0), self.warn_days, "--warn-days")
        if not self.timeout or self.timeout <= 0:
            raise ConfigurationError("--timeout", self.timeout, "seconds > 0")
        return self


def planned_checks(options: DoctorOptions) -> list[Callable[[], CheckResult]]:
    """The checks the options allow, in the order a worker meets them."""
    o = options.checked()
    checks: list[Callable[[], CheckResult]] = []
    if o.gateway_address:
        checks.append(lambda: check_gateway(o.gateway_address, o.timeout))
    if o.proxy_address:
        checks.append(lambda: check_proxy_port(o.proxy_address, o.timeout))
    if o.cert:
        checks.append(lambda: check_certificate(o.cert, o.key, o.warn_days))
    if o.cluster_name:
        checks.append(lambda: check_tls_sni(o.proxy_address, o.cluster_name, o.cert, o.key,
                                            o.timeout))
    checks.append(check_scheduler_exposure)
    if o.scheduler:
        checks.append(lambda: check_scheduler_access(o.scheduler, o.timeout))
    checks.append(check_settings)
    if o.system:
        checks.append(lambda: check_batch_system(
            o.system, max(o.timeout, BATCH_CHECK_TIMEOUT)))
        checks.append(lambda: check_pool_settings(str(o.system).lower()))
    worker_range = config.get("worker.port-range", None)
    checks.append(lambda: check_port_range(worker_range, "hybrid.worker.port-range",
                                           o.workers_per_node))
    container = config.get("worker.container", {}) or {}
    image = o.container_image or container.get("image")
    checks.append(lambda: check_worker_environment(image, o.pixi_project, o.conda_env))
    checks.append(check_gpu_sharing)
    return checks


def run_doctor(options: DoctorOptions) -> list[CheckResult]:
    """Run every check the options allow; the options are checked first."""
    return [check() for check in planned_checks(options)]


def format_results(results: list[CheckResult]) -> str:
    """One line per check, its fix below when it is not ok."""
    marks = {Status.ok: "[ ok ]", Status.warn: "[warn]", Status.fail: "[FAIL]"}
    lines = []
    for result in results:
        lines.append(f"{marks[result.status]} {result.name}: {result.message}")
        if result.fix and result.status is not Status.ok:
            lines.append(f"       fix: {result.fix}")
    failed = sum(r.status is Status.fail for r in results)
    warned = sum(r.status is Status.warn for r in results)
    lines.append(f"{len(results)} checks: {failed} failed, {warned} warnings")
    return "\n".join(lines)
