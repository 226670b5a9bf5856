"""Secure by default: nobody without a cluster's credentials runs code through its scheduler.

Every scheduler hybrid starts (:class:`~hybrid.HybridCluster`, the openff-evaluator-style
backends, ``DaskLocalCluster``) speaks TLS with client authentication unless plain TCP is
asked for (``security=False``, or ``hybrid.scheduler.tls: false``): a temporary CA per
cluster (``distributed.Security.temporary()``: one self-signed certificate that is the CA
and every role's certificate), and nothing is accepted without a certificate that CA
signed. Workers get the files through their 0600 job files; the owner's process keeps them
in memory; and so that a second process of the same user can re-attach, they are stored
with the cluster's address in a directory only that user can read
(:func:`credentials_root`, 0700, files 0600), removed when the cluster closes.

The dashboard listens on loopback unless configured (``hybrid.scheduler.dashboard-address``)
and is served over TLS when the scheduler is. docs/security.md says what this protects, by
what, and what it does not.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import functools
import ipaddress
import json
import numbers
import os
import shutil
import socket
import ssl
import stat
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from distributed.security import Security

from hybrid import config
from hybrid.batch.staging import write_private
from hybrid.errors import ConfigurationError, warn_user
from hybrid.worker import TLSFiles, read_pem

__all__ = [
    "ClusterCredentials",
    "InsecureClusterWarning",
    "ask_scheduler",
    "attach_security",
    "browsable",
    "browser_port",
    "credentials_root",
    "dashboard_link",
    "dashboard_listen",
    "dashboard_ssl_context",
    "find_credentials",
    "is_loopback_host",
    "listen_error",
    "listen_host",
    "load_security",
    "outsider_attempts",
    "own_security",
    "remove_credentials",
    "scheduler_class",
    "stale_credentials",
    "store_credentials",
    "wants_tls",
    "warn_if_open",
]

#: The file of a cluster's record in its credentials directory.
RECORD = "cluster.json"
_FILES = ("ca.pem", "cert.pem", "key.pem")
_SETTING = "hybrid.scheduler.credentials-directory"


class InsecureClusterWarning(UserWarning):
    """A scheduler listens beyond loopback in plain TCP: whoever reaches it runs code."""


# --------------------------------------------------------------------------- what to use
def own_security(security: Security | bool | None, field: str) -> Security | None:
    """The security of a scheduler about to be started: ``None`` takes
    ``hybrid.scheduler.tls`` (default true), ``True`` makes a temporary CA and certificate,
    ``False`` means plain TCP (returned as ``None``)."""
    if security is None:
        security = config.get("scheduler.tls", True)
    if security is True or (isinstance(security, Security) and security.require_encryption):
        credentials_root()  # where they will be stored: a bad setting fails before any start
    if security is True:
        return Security.temporary()
    if security is False:
        return None
    if isinstance(security, Security):
        return security
    raise ConfigurationError(field, security, "a distributed.Security, True for TLS with a "
                             "temporary CA (the default), or False for plain TCP")


def wants_tls(security: Security | bool | None) -> bool:
    """Whether a scheduler started with ``security`` (as :func:`own_security` reads it)
    speaks TLS, without making any certificate."""
    if security is None:
        return bool(config.get("scheduler.tls", True))
    if isinstance(security, Security):
        return bool(security.require_encryption)
    return security is True


def attach_security(security: Security | bool | None, address: str,
                    field: str) -> Security | None:
    """The security for connecting to a scheduler that runs already: the given one, else the
    credentials this user stored for it (:func:`find_credentials`); ``None``: plain TCP."""
    if isinstance(security, Security):
        return security
    if security is True:
        raise ConfigurationError(
            field, security, "the running cluster's distributed.Security, or None for the "
            "credentials stored for it", "A new temporary certificate cannot join a cluster "
            "that has its own CA: leave security out, or pass that cluster's Security.")
    if security is not None and security is not False:
        raise ConfigurationError(field, security, "a distributed.Security, or None for the "
                                 "credentials stored for the cluster")
    if security is False:
        return None
    found = find_credentials(address=address)
    if found is not None and found.tls:
        return found.security()
    if str(address).startswith("tls://"):
        raise ConfigurationError(
            field, None, f"the credentials of the cluster at {address}: none of yours is "
            f"stored for it under {credentials_root()}",
            "Connect as the user who started it (its credentials are stored in that user's "
            "own directory), or pass security=distributed.Security(tls_ca_file=..., "
            "tls_client_cert=..., tls_client_key=..., require_encryption=True).")
    return None


def is_loopback_host(host: str | None) -> bool:
    """Whether ``host`` (a listen host) is loopback only: ``""``/``None`` is every interface,
    and a name other than ``localhost`` counts as beyond loopback."""
    if not host:
        return False
    text = str(host).strip("[]")
    if text == "localhost":
        return True
    try:
        return ipaddress.ip_address(text).is_loopback
    except ValueError:
        return False


def listen_host(address: str) -> str:
    """The host part of a ``tcp://``/``tls://`` address."""
    from distributed.comm.addressing import get_address_host

    return get_address_host(address)


def listen_error(error: OSError, host_field: str, host: str | None,
                 port: int) -> ConfigurationError | None:
    """The setting by which a scheduler could not listen, where that was the cause (``host``
    of no interface here, ``port`` taken): named by ``host_field`` or
    ``HybridCluster.scheduler_port``; ``None`` for another cause."""
    if error.errno == errno.EADDRNOTAVAIL and host:
        return ConfigurationError(
            host_field, host, 'a host name or IP address of this machine, or "" (every '
            'interface)', f"Nothing here can listen on it ({error.strerror}).")
    if error.errno == errno.EADDRINUSE and port:
        return ConfigurationError(
            "HybridCluster.scheduler_port", port, "a port free on this machine",
            f"Another process listens on it ({error.strerror}): choose another, or 0 for "
            "any free port.")
    return None


def warn_if_open(what: str, address: str, listens_on: str | None, asked: str) -> None:
    """Warn that ``what`` listens in plain TCP beyond loopback (``listens_on``: the listen
    host, ``""`` for every interface), naming the open ``address`` and how it was asked."""
    if is_loopback_host(listens_on):
        return
    where = "every interface" if not listens_on else str(listens_on)
    warn_user(
        f"{what} listens in plain TCP on {where}: anyone who can reach {address} runs code "
        f"as you through it. Plain TCP was asked for ({asked}); leave security at its "
        "default (TLS with a certificate per cluster) unless this network is yours alone.",
        InsecureClusterWarning)


#: The ports browsers refuse to open a page on (the Fetch standard's "bad ports", which
#: Chromium, Firefox and Safari apply: ``ERR_UNSAFE_PORT``). A system whose ephemeral
#: ports start low (1024-65535) can hand one out for a port 0.
BROWSER_BLOCKED_PORTS = frozenset({
    1, 7, 9, 11, 13, 15, 17, 19, 20, 21, 22, 23, 25, 37, 42, 43, 53, 69, 77, 79, 87, 95, 101,
    102, 103, 104, 109, 110, 111, 113, 115, 117, 119, 123, 135, 137, 139, 143, 161, 179, 389,
    427, 465, 512, 513, 514, 515, 526, 530, 531, 532, 540, 548, 554, 556, 563, 587, 601, 636,
    989, 990, 993, 995, 1719, 1720, 1723, 2049, 3659, 4045, 4190, 5060, 5061, 6000, 6566,
    6665, 6666, 6667, 6668, 6669, 6679, 6697, 10080})


def browser_port(host: str) -> int:
    """A free TCP port on ``host`` (IPv4) that browsers open pages on."""
    from distributed.utils import open_port

    while (port := open_port(host)) in BROWSER_BLOCKED_PORTS:
        pass
    return port


def browsable(address: str) -> str:
    """A listen address with its port 0 ("any free port") made a free port that browsers
    open; other addresses as they are (and an IPv6 host's port 0, left to the system)."""
    if not address.endswith(":0"):
        return address
    from distributed.comm.addressing import parse_host_port, unparse_host_port

    host, _ = parse_host_port(address, default_port=0)
    try:
        return unparse_host_port(host, browser_port(host))
    except OSError:
        return address


def dashboard_listen(dashboard_address: str | int | bool | None,
                     field: str = "dashboard_address") -> tuple[str, bool]:
    """Where the scheduler's HTTP server listens and whether it shows the dashboard.

    ``True``: the configured place (``hybrid.scheduler.dashboard-address``, loopback by
    default); ``"HOST:PORT"``: there; ``":PORT"`` or a bare port (``8787``, ``"8787"``): that
    port on the scheduler's host (every interface when it has none); ``None``/``False``: no
    dashboard (the scheduler's HTTP routes, health and metrics, still answer, on loopback
    only). Checked as the configuration key is (``hybrid.fields.listen_address``), a bad
    value a :class:`ConfigurationError` naming ``field``. A dashboard's port 0 becomes a
    free port browsers open (:func:`browsable`).
    """
    from pydantic_core import PydanticCustomError

    from hybrid.fields import listen_address

    if dashboard_address is True:
        configured = config.get("scheduler.dashboard-address", "127.0.0.1:0")
        if configured is None:
            return "127.0.0.1:0", False
        return browsable(str(configured)), True
    if dashboard_address is None or dashboard_address is False:
        return "127.0.0.1:0", False
    text = str(dashboard_address).strip() if isinstance(dashboard_address, (
        str, numbers.Integral)) else None  # (np.int64 too)
    text = f":{text}" if text is not None and text.isascii() and text.isdigit() else text  # a port
    try:
        return browsable(listen_address(text, "", lowest_port=0)), True
    except PydanticCustomError:
        raise ConfigurationError(field, dashboard_address, 'an address "HOST:PORT" (e.g. '
                                 '"127.0.0.1:8787"), ":PORT" or a port (on the scheduler\'s '
                                 "host), True for hybrid.scheduler.dashboard-address, or None "
                                 "for no dashboard") from None


def dashboard_ssl_context(cert: str, key: str) -> ssl.SSLContext:
    """The server context of a dashboard served over TLS with the cluster's certificate."""
    context = ssl.create_default_context(purpose=ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    return context


@functools.lru_cache(maxsize=1)
def scheduler_class() -> type:
    """``distributed.Scheduler`` taking ``dashboard_ssl``: an ``ssl.SSLContext`` its HTTP
    server (dashboard, health, metrics) is served with, without touching ``dask.config``
    (whose ``distributed.scheduler.dashboard.tls.*`` settings, when set, still win)."""
    from distributed import Scheduler

    class TLSDashboardScheduler(Scheduler):
        def __init__(self, *args: Any, dashboard_ssl: ssl.SSLContext | None = None,
                     **kwargs: Any):
            self._hybrid_dashboard_ssl = dashboard_ssl
            super().__init__(*args, **kwargs)

        def start_http_server(self, routes: Any, dashboard_address: Any,
                              default_port: int = 0, ssl_options: Any = None) -> Any:
            return super().start_http_server(
                routes, dashboard_address, default_port,
                ssl_options=ssl_options or self._hybrid_dashboard_ssl)

    TLSDashboardScheduler.__module__ = __name__
    return TLSDashboardScheduler


def dashboard_link(scheduler: Any, tls: bool) -> str:
    """The link to a running scheduler's dashboard: where its HTTP server listens (the
    scheduler's own host when that is every interface), ``https`` when served over TLS."""
    import dask.config

    server = scheduler.http_server
    host = server.address
    if host in ("", "0.0.0.0", "::", None):
        host = listen_host(scheduler.address)
    if ":" in str(host):
        host = f"[{host}]"
    template = dask.config.get("distributed.dashboard.link")
    return template.format(**{**os.environ, "scheme": "https" if tls else "http",
                              "host": host, "port": server.port})


def load_security(info: dict[str, Any]) -> Security | None:
    """A ``distributed.client.security-loader``: the stored credentials of the cluster at
    ``info["address"]`` (``None`` when none is stored), so that a plain ``Client(address)``
    of the same user connects with TLS."""
    found = find_credentials(address=str(info.get("address", "")))
    return found.security() if found is not None and found.tls else None


# --------------------------------------------------------------------------- the store
def credentials_root() -> Path:
    """Where each cluster's credentials are stored (``hybrid.scheduler.credentials-directory``,
    default ``~/.cache/hybrid/clusters``)."""
    configured = config.get("scheduler.credentials-directory", None)
    if configured:
        return Path(str(configured)).expanduser()
    return Path.home() / ".cache" / "hybrid" / "clusters"


def _check_private(path: Path, label: str) -> None:
    """Refuse a directory another user could read or plant files in."""
    info = path.lstat()
    if stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode):
        raise ConfigurationError(label, str(path), "a directory (not a link or a file)",
                                 f"Remove {path}, or set {_SETTING} to a directory of yours.")
    if info.st_uid != os.geteuid():
        raise ConfigurationError(
            label, str(path), f"a directory owned by you (uid {os.geteuid()}), not by uid "
            f"{info.st_uid}", f"Set {_SETTING} to a directory of your own.")
    if info.st_mode & 0o077:
        raise ConfigurationError(
            label, str(path), f"a directory only you can use (mode 0700, not "
            f"{stat.S_IMODE(info.st_mode):04o})", f"chmod 700 {path}")


def _private_root(create: bool) -> Path | None:
    root = credentials_root()
    if not root.exists():
        if not create:
            return None
        root.mkdir(parents=True, exist_ok=True, mode=0o700)
        os.chmod(root, 0o700)
    _check_private(root, _SETTING)
    return root


@dataclass(frozen=True)
class ClusterCredentials:
    """One cluster's stored address and TLS files (a directory of :func:`credentials_root`)."""

    name: str
    directory: Path
    scheduler_address: str | None = None
    worker_scheduler_address: str | None = None
    dashboard_link: str | None = None
    pid: int | None = None
    host: str | None = None
    tls: bool = True
    created: float = 0.0

    @property
    def files(self) -> TLSFiles:
        """The CA, certificate and key files."""
        ca, cert, key = (str(self.directory / name) for name in _FILES)
        return TLSFiles(ca, cert, key)

    def security(self) -> Security:
        """A client's ``distributed.Security`` from the stored files."""
        files = self.files
        return Security(tls_ca_file=files.ca, tls_client_cert=files.cert,
                        tls_client_key=files.key, require_encryption=True)

    def record(self, **changes: Any) -> ClusterCredentials:
        """Write (``changes`` to) the cluster's record, 0600; the updated credentials."""
        fields = {**self.as_dict(), **changes}
        updated = ClusterCredentials(name=self.name, directory=self.directory,
                                     **{k: v for k, v in fields.items() if k != "name"})
        temporary = self.directory / f".{RECORD}.{os.getpid()}"
        write_private(temporary, json.dumps(updated.as_dict()))
        os.replace(temporary, self.directory / RECORD)
        return updated

    def as_dict(self) -> dict[str, Any]:
        """The record's JSON."""
        return {"name": self.name, "scheduler_address": self.scheduler_address,
                "worker_scheduler_address": self.worker_scheduler_address,
                "dashboard_link": self.dashboard_link, "pid": self.pid, "host": self.host,
                "tls": self.tls, "created": self.created}

    def owner_alive(self) -> bool | None:
        """Whether the process that started the cluster still runs (``None``: it ran on
        another host, so this one cannot tell)."""
        if self.host != socket.gethostname() or self.pid is None:
            return None
        import psutil

        return psutil.pid_exists(self.pid)


def _read(directory: Path) -> ClusterCredentials | None:
    try:
        data = json.loads((directory / RECORD).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("name") != directory.name:
        return None
    known = ("scheduler_address", "worker_scheduler_address", "dashboard_link", "pid",
             "host", "tls", "created")
    return ClusterCredentials(name=directory.name, directory=directory,
                              **{k: data[k] for k in known if k in data})


def store_credentials(name: str, security: Security | None) -> ClusterCredentials:
    """Create the directory of cluster ``name`` (0700) with its CA, certificate and key
    (0600, the client role's), before its scheduler starts; :meth:`ClusterCredentials.record`
    adds the address once it listens. A live cluster of another process by that name is an
    error; a stale one is replaced."""
    from hybrid.fields import Name, validate_value

    validate_value(Name, name, "HybridCluster.name")
    root = _private_root(create=True)
    assert root is not None
    directory = root / name

    def in_use(why: str) -> ConfigurationError:
        return ConfigurationError("HybridCluster.name", name, "a name no running cluster of "
                                  f"yours uses ({why})", "Choose another name.")

    starting = "another process is starting a cluster of that name"
    if directory.exists():
        old = _read(directory)
        if old is not None and old.pid != os.getpid() and old.owner_alive():
            raise in_use(f"process {old.pid} runs a cluster of that name")
        if old is None and time.time() - _last_touched(directory) < UNRECORDED_GRACE:
            raise in_use(starting)  # (its TLS files are being written: see stale_credentials)
        shutil.rmtree(directory, ignore_errors=True)
    try:
        directory.mkdir(mode=0o700)
    except FileExistsError:
        raise in_use(starting) from None
    try:
        tls = security is not None and bool(security.tls_ca_file)
        if tls:
            assert security is not None
            cert = security.tls_client_cert or security.tls_scheduler_cert
            key = security.tls_client_key or security.tls_scheduler_key or cert
            if not cert:
                raise ConfigurationError(
                    "HybridCluster.security", security,
                    "a Security with tls_ca_file and tls_client_cert (and key)")
            for filename, source in zip(_FILES, (security.tls_ca_file, cert, key), strict=True):
                write_private(directory / filename, read_pem(source))
        credentials = ClusterCredentials(name=name, directory=directory, pid=os.getpid(),
                                         host=socket.gethostname(), tls=tls,
                                         created=time.time())
        return credentials.record()
    except BaseException:
        shutil.rmtree(directory, ignore_errors=True)
        raise


def find_credentials(name: str | None = None,
                     address: str | None = None) -> ClusterCredentials | None:
    """The stored credentials of cluster ``name``, or of the cluster whose scheduler (or
    workers' address) is ``address``; ``None`` when this user has none."""
    root = _private_root(create=False)
    if root is None:
        return None
    if name is not None:
        candidate = root / name
        return _read(candidate) if candidate.is_dir() else None
    found = [c for c in (_read(d) for d in sorted(root.iterdir()) if d.is_dir())
             if c is not None and address in (c.scheduler_address, c.worker_scheduler_address)]
    return max(found, key=lambda c: c.created) if found else None


def remove_credentials(credentials: ClusterCredentials) -> None:
    """Delete a cluster's stored credentials (when its scheduler is gone)."""
    shutil.rmtree(credentials.directory, ignore_errors=True)


#: Seconds a cluster's directory may stay without a record (:func:`store_credentials` writes
#: the TLS files first) before ``hybrid gc`` takes it for the leftover of a broken start.
UNRECORDED_GRACE = 300.0


def _last_touched(directory: Path) -> float:
    """The newest modification time of ``directory`` and its files (0 if it is gone)."""
    times = []
    for path in (directory, *directory.iterdir()) if directory.is_dir() else ():
        with contextlib.suppress(OSError):
            times.append(path.lstat().st_mtime)
    return max(times, default=0.0)


def stale_credentials(reachable: Callable[[str | None], bool],
                      remove: bool = True) -> list[ClusterCredentials]:
    """Stored credentials of clusters that are gone: the process that started them is dead
    (on this host), or, started elsewhere, their scheduler does not answer; a directory
    without a record only once ``UNRECORDED_GRACE`` has passed since it was last written (a
    cluster may be starting). Removed unless ``remove`` is false."""
    root = _private_root(create=False)
    if root is None:
        return []
    gone = []
    for directory in sorted(root.iterdir()):
        if not directory.is_dir():
            continue
        credentials = _read(directory)
        if credentials is None:
            alive = time.time() - _last_touched(directory) < UNRECORDED_GRACE
            credentials = ClusterCredentials(name=directory.name, directory=directory)
        else:
            alive = credentials.owner_alive()
            if alive is None:
                alive = reachable(credentials.scheduler_address)
        if not alive:
            gone.append(credentials)
            if remove:
                remove_credentials(credentials)
    return gone


# --------------------------------------------------------------------------- outsiders
async def _ask_identity(address: str, connection_args: dict[str, Any],
                        timeout: float) -> dict[str, Any]:
    from distributed.comm import connect

    comm = await connect(address, timeout=timeout, **connection_args)
    try:
        await comm.write({"op": "identity", "reply": True})
        return await asyncio.wait_for(comm.read(), timeout)
    finally:
        with contextlib.suppress(Exception):
            await comm.close()


def _unverified_context(with_certificate: bool) -> ssl.SSLContext:
    """A client context that does not check the server; with a certificate of its own CA
    (not the cluster's) when asked."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    if with_certificate:
        import tempfile

        stranger = Security.temporary()
        with tempfile.TemporaryDirectory() as directory:
            cert = write_private(Path(directory) / "cert.pem", stranger.tls_client_cert)
            key = write_private(Path(directory) / "key.pem", stranger.tls_client_key)
            context.load_cert_chain(str(cert), str(key))
    return context


def outsider_attempts(address: str, timeout: float = 5.0) -> dict[str, str | None]:
    """What someone without the cluster's credentials gets from the scheduler at
    ``address``: for each attempt (plain TCP; for a ``tls://`` address also TLS without a
    certificate and TLS with a certificate another CA signed), ``None`` when the scheduler
    answered an RPC (anyone may run code there), else why it did not."""
    host_port = address.split("://", 1)[-1]
    attempts: dict[str, tuple[str, dict[str, Any]]] = {
        "plain TCP": (f"tcp://{host_port}", {})}
    if address.startswith("tls://"):
        attempts["TLS without a certificate"] = (address, {
            "ssl_context": _unverified_context(False), "require_encryption": True})
        attempts["TLS with another CA's certificate"] = (address, {
            "ssl_context": _unverified_context(True), "require_encryption": True})

    async def run_all() -> dict[str, str | None]:
        outcome: dict[str, str | None] = {}
        for label, (target, args) in attempts.items():
            try:
                await _ask_identity(target, args, timeout)
            except Exception as error:
                outcome[label] = f"{type(error).__name__}: {error}".strip()[:300]
            else:
                outcome[label] = None
        return outcome

    return asyncio.run(run_all())


def ask_scheduler(address: str, security: Security | None,
                  timeout: float = 5.0) -> dict[str, Any]:
    """The scheduler's ``identity`` (its workers among it), asked with ``security``."""
    args = (security or Security()).get_connection_args("client")
    return asyncio.run(_ask_identity(address, args, timeout))
