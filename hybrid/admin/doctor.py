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
import shutil
import socket
import ssl
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from hybrid import config
from hybrid.batch.base import run_command
from hybrid.errors import BatchError, ConfigurationError
from hybrid.gateway import scheduler_sni
from hybrid.worker import check_name, parse_port_range

#: Batch systems doctor knows, and the client tools each needs.
SYSTEM_TOOLS: dict[str, tuple[str, ...]] = {
    "htcondor": (),
    "slurm": ("sbatch", "squeue", "scancel"),
    "pbs": ("qsub", "qstat", "qdel"),
    "lsf": ("bsub", "bjobs", "bkill"),
}
DEFAULT_WARN_DAYS = 14
DEFAULT_TIMEOUT = 5.0


class Status(str, Enum):
    """The verdict of one check."""

    ok = "ok"
    warn = "warn"
    fail = "fail"


@dataclass(frozen=True)
class CheckResult:
    """One check: its name, verdict, what it saw, and the fix when it is not ok."""

    name: str
    status: Status
    message: str
    fix: str | None = None

    @property
    def ok(self) -> bool:
        """Not a failure (a warning passes)."""
        return self.status is not Status.fail

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {"check": self.name, "status": self.status.value, "message": self.message,
                "fix": self.fix}


def _ok(name: str, message: str) -> CheckResult:
    return CheckResult(name, Status.ok, message)


def _warn(name: str, message: str, fix: str) -> CheckResult:
    return CheckResult(name, Status.warn, message, fix)


def _fail(name: str, message: str, fix: str) -> CheckResult:
    return CheckResult(name, Status.fail, message, fix)


# --------------------------------------------------------------------------- addresses


def parse_gateway_address(address: str) -> str:
    """``http(s)://host[:port][/prefix]`` without a trailing slash."""
    parsed = urlparse(str(address))
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise ConfigurationError("--gateway-address", address,
                                 "an HTTP address like http://gateway.example.org:8000")
    return str(address).rstrip("/")


def parse_proxy_address(address: str) -> tuple[str, int]:
    """``host:port``, ``tls://host:port`` or ``gateway://host:port`` -> ``(host, port)``."""
    text = str(address)
    parsed = urlparse(text if "://" in text else f"tcp://{text}")
    accepted = "an address with a port, like gateway.example.org:8786 or tls://HOST:8786"
    try:
        port = parsed.port
    except ValueError:
        port = None
    if parsed.scheme not in ("tcp", "tls", "gateway") or not parsed.hostname or not port:
        raise ConfigurationError("--proxy-address", address, accepted)
    return parsed.hostname, port


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
            return _fail(name, f"{url} answered HTTP 503: the gateway says it is unhealthy",
                         "Look at the gateway server's log.")
        return _fail(name, f"{url} answered HTTP {error.code}: not a dask-gateway API there",
                     "Check --gateway-address (and its path prefix, e.g. /services/dask-gateway).")
    except (urllib.error.URLError, OSError, TimeoutError) as error:
        reason = getattr(error, "reason", error)
        return _fail(name, f"nothing answers at {base}: {reason}",
                     "Start the gateway or fix --gateway-address; check the firewall towards "
                     "the gateway's HTTP port.")
    except ValueError:
        return _fail(name, f"{url} answered, but not with JSON: not a dask-gateway API",
                     "Check --gateway-address.")
    if body.get("status") != "pass":
        return _fail(name, f"{url} says the gateway is unhealthy: {body}",
                     "Look at the gateway server's log.")
    version = "?"
    try:
        with urllib.request.urlopen(f"{base}/api/version", timeout=timeout) as response:
            version = json.loads(response.read().decode()).get("version", "?")
    except (OSError, ValueError):
        pass
    return _ok(name, f"dask-gateway {version} answers at {base}")


def check_proxy_port(address: str, timeout: float = DEFAULT_TIMEOUT) -> CheckResult:
    """Something accepts TCP connections at the proxy (ingress) address."""
    name = "proxy port"
    host, port = parse_proxy_address(address)
    try:
        with socket.create_connection((host, port), timeout=timeout):
            pass
    except TimeoutError:
        return _fail(name, f"{host}:{port} did not answer within {timeout:g} s (filtered?)",
                     f"Open TCP {port} from this node to the ingress (see `hybrid admin ports`).")
    except OSError as error:
        reason = error.strerror or error
        return _fail(name, f"proxy down: cannot connect to {host}:{port} ({reason})",
                     "Start the gateway's proxy/ingress, or fix --proxy-address.")
    return _ok(name, f"{host}:{port} accepts TCP connections")


def check_tls_sni(proxy_address: str, cluster_name: str, cert: str | Path,
                  key: str | Path | None = None,
                  timeout: float = DEFAULT_TIMEOUT) -> CheckResult:
    """A TLS handshake through the proxy with SNI ``daskgateway-<cluster>`` succeeds.

    The cluster's certificate is the CA: the scheduler's certificate must be signed by it.
    With ``key`` the client presents the certificate as a worker does.
    """
    name = "TLS by SNI"
    host, port = parse_proxy_address(proxy_address)
    sni = scheduler_sni(check_name(cluster_name, "--cluster-name"))
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False  # dask checks the chain, not the name
    try:
        context.load_verify_locations(cafile=str(cert))
        if key is not None:
            context.load_cert_chain(str(cert), str(key))
    except (OSError, ssl.SSLError) as error:
        return _fail(name, f"cannot load {cert}{' / ' + str(key) if key else ''} for TLS: {error}",
                     "Give --cert (and --key) the cluster's certificate and key files (PEM).")
    try:
        with socket.create_connection((host, port), timeout=timeout) as raw:
            with context.wrap_socket(raw, server_hostname=sni) as tls:
                version = tls.version()
    except ssl.SSLCertVerificationError as error:
        if error.verify_code == 10:  # X509_V_ERR_CERT_HAS_EXPIRED
            return _fail(name, f"the certificate has expired ({error.verify_message})",
                         "Start a new cluster: its certificate is made fresh.")
        subject = _presented_subject(host, port, sni, timeout)
        if subject and "TRAEFIK DEFAULT CERT" in subject:
            return _fail(name, f"the ingress has no route for SNI {sni}: Traefik answered "
                               f"with its own certificate ({subject})",
                         "Route daskgateway-* with TLS passthrough (`hybrid admin ingress`); "
                         "check --cluster-name.")
        return _fail(name, f"wrong certificate: the scheduler behind {sni} is not signed by "
                           f"{cert} ({error.verify_message}; it presented {subject or '?'})",
                     "Use the certificate of THIS cluster (cluster.security.tls_cert).")
    except (ssl.SSLEOFError, ConnectionResetError, BrokenPipeError) as error:
        return _fail(name, f"the proxy closed the connection for SNI {sni}: no cluster of that "
                           f"name is routed there ({error.__class__.__name__})",
                     "Check --cluster-name (a running cluster), and that the ingress routes "
                     "daskgateway-* (`hybrid admin ingress`).")
    except ssl.SSLError as error:
        return _fail(name, f"TLS handshake with {sni} failed: {error}",
                     "Check that --proxy-address is the gateway's TLS proxy, not its HTTP port.")
    except TimeoutError:
        return _fail(name, f"TLS handshake with {sni} did not finish within {timeout:g} s",
                     "Check that --proxy-address is the gateway's TLS proxy port.")
    except OSError as error:
        return _fail(name, f"cannot connect to {host}:{port} ({error.strerror or error})",
                     "Start the proxy/ingress, or fix --proxy-address.")
    return _ok(name, f"{version} handshake with {sni} at {host}:{port}, scheduler certificate "
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
        return _fail(name, f"cannot read {cert}: {error.strerror}",
                     "Write the cluster's certificate (cluster.security.tls_cert) to --cert.")
    try:
        certificate = x509.load_pem_x509_certificate(data)
    except ValueError:
        return _fail(name, f"{cert} is not a PEM certificate",
                     "Give --cert the cluster's certificate in PEM form.")
    now = now or dt.datetime.now(dt.timezone.utc)
    not_after = certificate.not_valid_after_utc
    not_before = certificate.not_valid_before_utc
    if not_after <= now:
        return _fail(name, f"certificate expired on {not_after:%Y-%m-%d %H:%M} UTC",
                     "Start a new cluster (its certificate is made fresh) and use its files.")
    if not_before > now:
        return _fail(name, f"certificate not valid before {not_before:%Y-%m-%d %H:%M} UTC",
                     "Check this node's clock (NTP).")
    if key is not None:
        try:
            private_key = serialization.load_pem_private_key(Path(key).read_bytes(), None)
        except (OSError, ValueError, TypeError) as error:
            return _fail(name, f"cannot load the key {key}: {error}",
                         "Give --key the cluster's unencrypted PEM key "
                         "(cluster.security.tls_key).")
        public = serialization.PublicFormat.SubjectPublicKeyInfo
        encoding = serialization.Encoding.DER
        if (private_key.public_key().public_bytes(encoding, public)
                != certificate.public_key().public_bytes(encoding, public)):
            return _fail(name, f"the key {key} does not belong to the certificate {cert}",
                         "Use the certificate and key of the same cluster.")
    days_left = (not_after - now).total_seconds() / 86400
    if days_left < warn_days:
        return _warn(name, f"certificate expires in {days_left:.1f} days "
                           f"({not_after:%Y-%m-%d} UTC)",
                     "Plan a new cluster before then: running workers lose their scheduler.")
    return _ok(name, f"valid until {not_after:%Y-%m-%d} UTC ({days_left:.0f} days)")


# --------------------------------------------------------------------------- batch systems

_HTCONDOR_PROBE = r"""
import json, os, sys
try:
    import htcondor2
except ImportError as error:
    print(json.dumps({"import_error": str(error)})); sys.exit(0)
p = htcondor2.param
methods = p.get("SEC_CLIENT_AUTHENTICATION_METHODS") or p.get("SEC_DEFAULT_AUTHENTICATION_METHODS")
dirs = [p.get("SEC_TOKEN_DIRECTORY") or os.path.expanduser("~/.condor/tokens.d")]
system_dir = p.get("SEC_TOKEN_SYSTEM_DIRECTORY") or "/etc/condor/tokens.d"
if os.geteuid() == 0 and os.path.isdir(system_dir) and system_dir not in dirs:
    dirs.append(system_dir)
out = {"methods": methods, "token_dirs": dirs}
if sys.argv[1] == "query":
    try:
        htcondor2.Schedd().query(constraint="false", projection=["ClusterId"], limit=1)
    except Exception as error:
        out["query_error"] = f"{error.__class__.__name__}: {error}"
print(json.dumps(out))
"""


def _htcondor_probe(step: str, timeout: float) -> dict[str, Any]:
    """Run the bindings in a child: they read ``CONDOR_CONFIG`` afresh and may block."""
    try:
        result = subprocess.run([sys.executable, "-c", _HTCONDOR_PROBE, step],
                                capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"timeout": True}
    lines = result.stdout.strip().splitlines()
    if result.returncode != 0 or not lines:
        return {"query_error": (result.stderr.strip().splitlines() or ["no output"])[-1]}
    try:
        return json.loads(lines[-1])
    except ValueError:
        return {"query_error": lines[-1]}


def _token_files(directories: list[str]) -> tuple[list[Path], list[Path]]:
    """Token files HTCondor would use (mode 0600) and those it ignores (wider modes)."""
    usable, ignored = [], []
    for directory in directories:
        folder = Path(directory)
        if not folder.is_dir():
            continue
        for path in sorted(folder.iterdir()):
            if not path.is_file() or path.name.startswith(".") or path.stat().st_size == 0:
                continue
            (usable if path.stat().st_mode & 0o077 == 0 else ignored).append(path)
    return usable, ignored


def check_htcondor(timeout: float = 20.0) -> CheckResult:
    """``htcondor2`` imports, an IDTOKENS token is there when required, the schedd answers."""
    name = "batch system (htcondor)"
    config_file = os.environ.get("CONDOR_CONFIG")
    if config_file and config_file.upper() != "ONLY_ENV" and not Path(config_file).is_file():
        return _fail(name, f"CONDOR_CONFIG={config_file} does not exist",
                     "Point CONDOR_CONFIG at the pool's client configuration, or unset it.")
    probe = _htcondor_probe("config", timeout)
    if "import_error" in probe:
        return _fail(name, f"the HTCondor bindings are missing: {probe['import_error']}",
                     "pip install htcondor (the module is htcondor2).")
    if "timeout" in probe or "query_error" in probe:
        return _fail(name, f"the HTCondor bindings cannot read their configuration: "
                           f"{probe.get('query_error', 'timed out')}",
                     "Check CONDOR_CONFIG.")
    methods = [m.strip().upper() for m in (probe.get("methods") or "").split(",") if m.strip()]
    token_problem: tuple[str, str] | None = None
    if "IDTOKENS" in methods:
        token_problem = _token_problem(probe["token_dirs"])
        if token_problem and methods == ["IDTOKENS"]:
            return _fail(name, *token_problem)
    probe = _htcondor_probe("query", timeout)
    also = f"; also {token_problem[0]}" if token_problem else ""
    if "timeout" in probe:
        return _fail(name, f"the schedd query did not answer within {timeout:g} s{also}",
                     "Check COLLECTOR_HOST/CONDOR_HOST in CONDOR_CONFIG and the firewall.")
    if "query_error" in probe:
        return _fail(name, f"the schedd refused or cannot be reached: {probe['query_error']}"
                           f"{also}",
                     "Check CONDOR_CONFIG, your authorisation (token) and that the pool is up.")
    if token_problem:
        others = ", ".join(m for m in methods if m != "IDTOKENS")
        return _warn(name, f"schedd answers through {others}, but {token_problem[0]}",
                     token_problem[1])
    return _ok(name, f"htcondor2 present, schedd answers (authentication: "
                     f"{', '.join(methods) or 'default'})")


def _token_problem(token_dirs: list[str]) -> tuple[str, str] | None:
    """What is wrong with the IDTOKENS token files (message, fix), or None."""
    usable, ignored = _token_files(token_dirs)
    if usable:
        return None
    if ignored:
        return (f"IDTOKENS token file(s) ignored, mode not 0600: "
                f"{', '.join(map(str, ignored))}", "chmod 600 the token file(s).")
    return (f"IDTOKENS is configured but no token file is in {', '.join(token_dirs)}",
            "Ask the pool admin for a token (condor_token_fetch, or condor_token_create "
            f"-identity USER@DOMAIN) and save it 0600 in {token_dirs[0]}.")


def check_command_line_system(system: str, timeout: float = 20.0) -> CheckResult:
    """Slurm, PBS, LSF: the client tools are on PATH; Slurm's ``squeue`` answers."""
    name = f"batch system ({system})"
    tools = SYSTEM_TOOLS[system]
    missing = [tool for tool in tools if shutil.which(tool) is None]
    if missing:
        return _fail(name, f"{', '.join(missing)} not found on PATH",
                     f"Install the {system.upper()} client tools on this node or add them to PATH.")
    if system == "slurm":
        user = os.environ.get("USER") or os.environ.get("LOGNAME") or str(os.getuid())
        try:
            run_command(["squeue", "--noheader", "--user", user, "--format", "%i"],
                        timeout=timeout)
        except BatchError as error:
            first_line = str(error).splitlines()[0]
            return _fail(name, f"squeue present but not answering: {first_line}",
                         "Check that slurmctld is up and reachable (scontrol ping), and "
                         "SLURM_CONF.")
        return _ok(name, "sbatch, squeue and scancel present; squeue answers")
    return _ok(name, f"{', '.join(tools)} present")


def check_batch_system(system: str, timeout: float = 20.0) -> CheckResult:
    """The batch system's bindings or tools are present and answer."""
    key = str(system).lower()
    if key not in SYSTEM_TOOLS:
        raise ConfigurationError("--system", system, ", ".join(SYSTEM_TOOLS))
    if key == "htcondor":
        return check_htcondor(timeout)
    return check_command_line_system(key, timeout)


# --------------------------------------------------------------------------- local node


def check_port_range(port_range: str | tuple[int, int], field: str = "hybrid.worker.port-range",
                     workers_per_node: int = 1) -> CheckResult:
    """Every port of the range can be bound here; at least ``workers_per_node`` are free."""
    name = f"ports {field}"
    ports = (port_range if isinstance(port_range, tuple)
             else parse_port_range(port_range, field))
    if ports is None:
        return _warn(name, "no range set: workers listen on random ports",
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
        return _fail(name, f"busy port range: {len(busy)} of {total} ports in use ({shown}); "
                           f"{free} free for {workers_per_node} worker(s)",
                     f"Stop what holds them (ss -ltnp) or move {field} to a free range.")
    if busy:
        return _warn(name, f"{len(busy)} of {total} ports in use ({shown}); {free} free",
                     f"Enough for {workers_per_node} worker(s); free them or move {field}.")
    return _ok(name, f"all {total} ports {first}-{last} free")


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
                return _fail(name, f"container image {image} does not exist",
                             "Build or copy the image there (apptainer build), or fix "
                             "hybrid.worker.container.image.")
            if image.is_file() and not os.access(image, os.R_OK):
                return _fail(name, f"container image {image} is not readable",
                             "chmod a+r the image (jobs may run as another user).")
            seen.append(f"image {image}")
    if pixi_project:
        project = Path(pixi_project)
        if not (project / "pixi.toml").is_file():
            return _fail(name, f"no pixi.toml in {project}",
                         "Point --pixi-project at the directory holding pixi.toml (pixi init).")
        if not (project / ".pixi" / "envs").is_dir():
            return _warn(name, f"pixi project {project} is not installed (no .pixi/envs)",
                         f"Run `pixi install --manifest-path {project / 'pixi.toml'}` once.")
        seen.append(f"pixi project {project}")
    if conda_env:
        env = Path(conda_env)
        if not (env / "conda-meta").is_dir():
            return _fail(name, f"{env} is not a conda environment (no conda-meta/)",
                         "Create it (conda create -p ENV python distributed) or fix --conda-env.")
        if not (env / "bin" / "python").exists():
            return _fail(name, f"conda environment {env} has no bin/python",
                         "Install python and distributed into it.")
        seen.append(f"conda env {env}")
    if not seen:
        python = config.get("worker.python", None) or sys.executable
        return _ok(name, f"no image, pixi project or conda env given: workers run {python}")
    return _ok(name, "; ".join(seen) + " present")


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
            check_name(self.cluster_name, "--cluster-name")
            if not (self.proxy_address and self.cert):
                raise ConfigurationError(
                    "--cluster-name", self.cluster_name, "--proxy-address and --cert with it",
                    fix="The TLS check needs where to connect and the cluster's certificate.")
        if self.key and not self.cert:
            raise ConfigurationError("--key", self.key, "--cert with it")
        if self.system is not None and str(self.system).lower() not in SYSTEM_TOOLS:
            raise ConfigurationError("--system", self.system, ", ".join(SYSTEM_TOOLS))
        for field, value, least in (("--workers-per-node", self.workers_per_node, 1),
                                    ("--warn-days", self.warn_days, 0)):
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                raise ConfigurationError(field, value, f"a whole number >= {least}")
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
    if o.system:
        checks.append(lambda: check_batch_system(o.system))
    worker_range = config.get("worker.port-range", None)
    checks.append(lambda: check_port_range(worker_range, "hybrid.worker.port-range",
                                           o.workers_per_node))
    container = config.get("worker.container", {}) or {}
    image = o.container_image or container.get("image")
    checks.append(lambda: check_worker_environment(image, o.pixi_project, o.conda_env))
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
