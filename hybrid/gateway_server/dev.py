"""A real dask-gateway-server on 127.0.0.1 for development and tests (``hybrid gateway dev``).

:func:`start_dev_gateway` writes the settings
(:class:`~hybrid.gateway_server.settings.GatewaySettings`, as YAML) into a private state
directory, runs ``dask-gateway-server`` with the packaged configuration file
(:data:`hybrid.gateway_server.CONFIG_FILE`) as a subprocess in its own process group, waits
until its API answers and returns a :class:`DevGateway` (a context manager) with the
addresses and credentials a client needs. :meth:`DevGateway.stop` stops the server (which
stops its clusters), then ends whatever process the server had started that is still there,
and removes a temporary state directory.

The server uses ``UnsafeLocalBackend``: schedulers (and the gateway's own workers) run as the
invoking user, which is what a one-user development server wants, root included
(``LocalBackend`` would switch to the Unix user named by each login). By default the gateway
starts its own local workers (``gateway_workers``), so a cluster without a batch pool behaves
as on a stock gateway, and offers ``worker_cores``/``worker_memory`` as cluster options.
"""

from __future__ import annotations

import base64
import getpass
import logging
import os
import secrets
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from distributed.comm.addressing import parse_host_port
from distributed.utils import open_port

from hybrid.batch.staging import write_private
from hybrid.errors import ConfigurationError, HybridError
from hybrid.fields import Interval, ListenPort, validate_value
from hybrid.gateway_server import CONFIG_FILE
from hybrid.gateway_server.settings import (
    SETTINGS_ENV,
    SETTINGS_TEXT_ENV,
    GatewaySettings,
    parse_settings,
    settings_yaml,
)
from hybrid.security import BROWSER_BLOCKED_PORTS, browser_port

logger = logging.getLogger(__name__)

HOST = "127.0.0.1"
PASSWORD_FILE = "password"
DB_KEY_FILE = "db-key"
SETTINGS_FILE = "hybrid-gateway.yaml"
LOG_FILE = "gateway.log"
DATABASE_FILE = "gateway.sqlite"
CLUSTERS_DIRECTORY = "clusters"
#: Settings the dev gateway decides itself (the rest may be given to start_dev_gateway).
OWN_SETTINGS = ("backend", "authenticator", "password_file", "jupyterhub_api_url", "address",
                "proxy_address", "tcp_proxy_address", "db_url", "db_key_file",
                "clusters_directory", "scheduler_command", "worker_command")


class DevGatewayError(HybridError, RuntimeError):
    """The development gateway did not start or stop; the message carries its log's tail."""


def _check_port(value: Any, field_name: str, *, browsed: bool = False) -> int:
    """A free port on loopback, or 0 (any); ``browsed``: the port of the page people open,
    which must not be one that browsers refuse to open (``ERR_UNSAFE_PORT``)."""
    value = validate_value(ListenPort, value, field_name)
    if browsed and value in BROWSER_BLOCKED_PORTS:
        raise ConfigurationError(field_name, value, "a port that browsers open pages on",
                                 "Browsers refuse this one (ERR_UNSAFE_PORT): give another, "
                                 "or 0 for a free one that they open.")
    if value:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind((HOST, value))
            except OSError:
                raise ConfigurationError(field_name, value, f"a port free on {HOST}",
                                         "Something already uses it; give another or 0.",
                                         ) from None
    return value


def _check_password(value: Any) -> str:
    if not isinstance(value, str) or not value or value != value.strip() or any(
            ch in value for ch in "\r\n\0"):
        raise ConfigurationError("password", "<hidden>",
                                 "a non-empty password without surrounding blanks or newlines")
    return value


def _check_username(value: Any) -> str:
    if not isinstance(value, str) or not value or ":" in value or any(
            ch.isspace() for ch in value):
        raise ConfigurationError("username", value, "a non-empty name without ':' or blanks")
    return value


@dataclass
class DevGateway:
    """A running development gateway: where it listens, how to log in, how to stop it."""

    #: The HTTP address clients connect to (``Gateway(address=...)``).
    address: str
    #: The TCP proxy as ``dask_gateway.Gateway`` wants it (``gateway://127.0.0.1:PORT``).
    proxy_address: str
    username: str
    password: str = field(repr=False)
    state_dir: Path
    pid: int
    process: subprocess.Popen = field(repr=False)
    temporary_state: bool = False
    #: Whether the gateway starts its own workers (``scale`` without a batch pool).
    gateway_workers: bool = True
    _stopped: bool = field(default=False, repr=False)

    # -- what a client needs ------------------------------------------------------------
    @property
    def proxy_port(self) -> int:
        """The TCP proxy's port."""
        return parse_host_port(self.proxy_address)[1]

    @property
    def worker_scheduler_address(self) -> str:
        """What an external worker dials (with ``--scheduler-sni daskgateway-<cluster>``)."""
        return f"tls://{HOST}:{self.proxy_port}"

    def auth(self) -> Any:
        """``dask_gateway.BasicAuth`` with this gateway's user and password."""
        from dask_gateway import BasicAuth

        return BasicAuth(self.username, self.password)

    def gateway_kwargs(self) -> dict[str, Any]:
        """``Gateway(**dev.gateway_kwargs())`` (or any subclass, e.g. HTCGateway)."""
        return {"address": self.address, "proxy_address": self.proxy_address,
                "auth": self.auth()}

    def gateway(self, cls: type | None = None, **kwargs: Any) -> Any:
        """A client of this gateway: ``cls`` (default ``dask_gateway.Gateway``) instance."""
        if cls is None:
            from dask_gateway import Gateway as cls
        return cls(**{**self.gateway_kwargs(), **kwargs})

    def connect_snippet(self) -> str:
        """The Python a user pastes to connect (holds the password)."""
        return (
            "from dask_gateway import BasicAuth\n"
            "from hybrid import HTCGateway\n\n"
            f"gateway = HTCGateway(address={self.address!r}, "
            f"proxy_address={self.proxy_address!r},\n"
            f"                     auth=BasicAuth({self.username!r}, {self.password!r}))\n"
        )

    def workers_snippet(self) -> str:
        """How to get workers: the gateway's own, and batch-style local ones."""
        batch = ('cluster = gateway.new_cluster(pool="local")  # batch-style local workers:\n'
                 "cluster.scale(2)                    # they join through the TCP proxy\n")
        if not self.gateway_workers:
            return ("This gateway starts no workers itself; give clusters a batch pool:\n\n"
                    + batch)
        return ("cluster = gateway.new_cluster()     # the gateway's own local workers,\n"
                "cluster.scale(2)                    # as on a stock dask-gateway\n\n" + batch)

    def banner(self) -> str:
        """What ``hybrid gateway dev`` prints once: addresses, credentials, the Python."""
        state = ("temporary, removed on exit" if self.temporary_state
                 else str(self.state_dir))
        return (
            "hybrid dev gateway (a real dask-gateway-server on 127.0.0.1)\n"
            f"  address:        {self.address}\n"
            f"  proxy (TCP):    {self.proxy_address}   "
            f"workers dial {self.worker_scheduler_address}\n"
            f"  user/password:  {self.username} / {self.password}\n"
            f"  state:          {state}\n"
            f"  server pid:     {self.pid}\n\n"
            "Connect with:\n\n" + self.connect_snippet() +
            "\nWorkers:\n\n" + self.workers_snippet() +
            "\nCtrl-C stops the gateway and its clusters.\n"
        )

    # -- files --------------------------------------------------------------------------
    @property
    def settings_path(self) -> Path:
        """The settings YAML the server reads (0600)."""
        return self.state_dir / SETTINGS_FILE

    @property
    def log_path(self) -> Path:
        """The server's log (stdout and stderr)."""
        return self.state_dir / LOG_FILE

    def log_text(self) -> str:
        """The server's log so far ("" once a temporary state directory is gone)."""
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def log_tail(self, lines: int = 40) -> str:
        """The last ``lines`` lines of the server's log."""
        return "\n".join(self.log_text().splitlines()[-lines:])

    # -- life cycle ---------------------------------------------------------------------
    @property
    def running(self) -> bool:
        """True while the server process runs."""
        return self.process.poll() is None

    def stop(self, timeout: float = 30) -> None:
        """Stop the server and its clusters; end what is left of them; remove a temp state."""
        if self._stopped:
            return
        import psutil

        self._stopped = True
        descendants: list[psutil.Process] = []
        try:
            descendants = psutil.Process(self.pid).children(recursive=True)
        except psutil.Error:
            pass
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                logger.warning("dask-gateway-server (pid %d) did not stop in %g s: killing its "
                               "process group", self.pid, timeout)
                _kill_group(self.pid)
                self.process.wait(10)
        # what the server started and left (psutil checks each is still that very process)
        descendants += _processes_working_in(self.state_dir / CLUSTERS_DIRECTORY)
        _end_processes(descendants)
        if self.temporary_state:
            shutil.rmtree(self.state_dir, ignore_errors=True)

    def __enter__(self) -> DevGateway:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.stop()


_PR_SET_PDEATHSIG = 1


def _parent_death_signal() -> Any:
    """A function for ``preexec_fn`` that makes the server get SIGTERM when its parent dies,
    so a killed test run or CLI leaves no gateway (and no cluster) behind. Linux only; the
    C function is looked up here, in the parent, so the child only calls it."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None

    def set_parent_death_signal() -> None:
        prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)

    return set_parent_death_signal


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _processes_working_in(directory: Path) -> list[Any]:
    """Processes whose working directory is under ``directory`` (our clusters' schedulers)."""
    import psutil

    found = []
    root = str(directory)
    for process in psutil.process_iter():
        try:
            cwd = process.cwd()
        except psutil.Error:
            continue
        if cwd == root or cwd.startswith(root + os.sep):
            found.append(process)
    return found


def _end_processes(processes: list[Any], grace: float = 5) -> None:
    """SIGTERM, then SIGKILL, the processes (psutil objects) that still run."""
    import psutil

    alive = [p for p in processes if p.is_running()]
    for process in alive:
        try:
            process.terminate()
        except psutil.Error:
            pass
    _gone, alive = psutil.wait_procs(alive, timeout=grace)
    for process in alive:
        try:
            process.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(alive, timeout=grace)


def _check_own_directory(path: Path) -> None:
    """An existing state directory must be the user's, and no one else may write to it:
    the gateway reads its password from there and keeps its keys in it."""
    info = path.stat()
    if info.st_uid != os.geteuid():
        raise ConfigurationError(
            "state_dir", str(path), f"a directory owned by you (uid {os.geteuid()}), not by "
            f"uid {info.st_uid}", "Use a directory of your own, or leave state_dir out (a "
            "new private one is made).")
    if info.st_mode & 0o022:
        raise ConfigurationError(
            "state_dir", str(path), "a directory only you may write to (not mode "
            f"{stat.S_IMODE(info.st_mode):04o})", f"chmod go-w {path}")


def _prepare_state_dir(state_dir: str | os.PathLike | None) -> tuple[Path, bool]:
    if state_dir is None:
        return Path(tempfile.mkdtemp(prefix="hybrid-gateway-")), True
    path = Path(state_dir).expanduser().absolute()
    if path.exists() and not path.is_dir():
        raise ConfigurationError("state_dir", str(path), "a directory (or a path to create)")
    if not path.exists():
        path.mkdir(parents=True, mode=0o700)
    return path, False


def _wait_until_answering(gateway: DevGateway, timeout: float) -> None:
    url = gateway.address + "/api/health"
    deadline = time.monotonic() + timeout
    while True:
        if not gateway.running:
            raise DevGatewayError(
                f"dask-gateway-server exited (code {gateway.process.returncode}) before its API "
                f"answered. Its log ends with:\n{gateway.log_tail()}")
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        if time.monotonic() > deadline:
            raise DevGatewayError(
                f"dask-gateway-server did not answer at {url} within {timeout:g} s. Its log ends "
                f"with:\n{gateway.log_tail()}")
        time.sleep(0.1)


def _dev_settings(state: Path, api_port: int, port: int, proxy_port: int,
                  settings: dict[str, Any]) -> GatewaySettings:
    """The dev gateway's settings: its own parts, then the caller's."""
    for name in settings:
        if name in OWN_SETTINGS:
            raise ConfigurationError(name, settings[name], "a setting the dev gateway does not "
                                     "decide itself", f"The dev gateway sets {name}; remove it.")
    python = sys.executable
    return parse_settings({
        "backend": "unsafe-local", "authenticator": "simple",
        "password_file": str(state / PASSWORD_FILE),
        "address": f"{HOST}:{api_port}", "proxy_address": f"{HOST}:{port}",
        "tcp_proxy_address": f"{HOST}:{proxy_port}",
        "scheduler_command": [python, "-m", "dask", "scheduler"],
        # its own workers listen on loopback too (dask-gateway gives them no --host)
        "worker_command": [python, "-m", "dask", "worker", "--host", HOST],
        "db_url": f"sqlite:///{state / DATABASE_FILE}", "db_key_file": str(state / DB_KEY_FILE),
        "clusters_directory": str(state / CLUSTERS_DIRECTORY),
        "gateway_workers": True, "worker_options": True, "cluster_start_timeout": 60,
        **settings,
    })


def _free_ports(port: int, proxy_port: int) -> tuple[int, int, int]:
    # the HTTP port is the page people open: one browsers open
    ports = {"port": port or browser_port(HOST), "proxy_port": proxy_port or open_port(HOST)}
    api_port = open_port(HOST)
    while api_port in ports.values():
        api_port = open_port(HOST)
    if ports["port"] == ports["proxy_port"]:
        ports["proxy_port"] = open_port(HOST)
    return api_port, ports["port"], ports["proxy_port"]


def _server_environment(settings_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != SETTINGS_TEXT_ENV}
    env[SETTINGS_ENV] = str(settings_path)
    return env


def start_dev_gateway(
    *,
    port: int = 0,
    proxy_port: int = 0,
    password: str | None = None,
    username: str | None = None,
    state_dir: str | os.PathLike | None = None,
    start_timeout: float = 60,
    **settings: Any,
) -> DevGateway:
    """Start a real dask-gateway-server on 127.0.0.1 and wait until it answers.

    Parameters
    ----------
    port, proxy_port
        The HTTP address users connect to, and the TCP proxy workers and clients reach
        schedulers through (0: a free port).
    password, username
        The login (default: a generated password, or the one a ``state_dir`` keeps; the
        invoking user's name).
    state_dir
        Where the settings, password, database, log and cluster directories live (default: a
        temporary directory removed by :meth:`DevGateway.stop`).
    start_timeout
        Seconds to wait for the server's API.
    **settings
        More :class:`~hybrid.gateway_server.settings.GatewaySettings` (``heartbeat_period``,
        ``idle_timeout``, ``max_lifetime``, ``client_timeout``, ``cluster_max_workers``,
        ``gateway_workers``, ``preload``...), checked before anything starts.
    """
    port = _check_port(port, "port", browsed=True)
    proxy_port = _check_port(proxy_port, "proxy_port")
    if port and port == proxy_port:
        raise ConfigurationError("proxy_port", proxy_port, "a port other than port",
                                 "Give two different ports, or 0 to pick free ones.")
    if password is not None:
        _check_password(password)
    username = _check_username(username if username is not None else getpass.getuser())
    start_timeout = validate_value(Interval, start_timeout, "start_timeout")
    if state_dir is not None:
        existing = Path(state_dir).expanduser()
        if existing.exists() and not existing.is_dir():
            raise ConfigurationError("state_dir", str(state_dir),
                                     "a directory (or a path to create)")
        if existing.is_dir():
            _check_own_directory(existing)

    api_port, port, proxy_port = _free_ports(port, proxy_port)
    # Validate the whole configuration before anything is written or started.
    _dev_settings(Path(tempfile.gettempdir()), api_port, port, proxy_port, settings)
    path, temporary = _prepare_state_dir(state_dir)
    try:
        config = _dev_settings(path, api_port, port, proxy_port, settings)
        password_path = path / PASSWORD_FILE
        if password is None and password_path.exists():
            password = password_path.read_text().strip()
        if not password:
            password = secrets.token_urlsafe(24)
        write_private(password_path, password + "\n")
        key_path = path / DB_KEY_FILE
        if not key_path.exists():
            write_private(key_path, base64.b64encode(os.urandom(32)).decode() + "\n")
        write_private(path / SETTINGS_FILE, settings_yaml(
            config, "hybrid dev gateway settings (written by start_dev_gateway)"))
        (path / CLUSTERS_DIRECTORY).mkdir(mode=0o700, exist_ok=True)
        database = path / DATABASE_FILE
        os.close(os.open(database, os.O_WRONLY | os.O_CREAT, 0o600))  # SQLite keeps the mode
        log_fd = os.open(path / LOG_FILE, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            process = subprocess.Popen(
                [sys.executable, "-m", "dask_gateway_server", "-f", str(CONFIG_FILE)],
                cwd=path, stdin=subprocess.DEVNULL, stdout=log_fd, stderr=subprocess.STDOUT,
                env=_server_environment(path / SETTINGS_FILE), start_new_session=True,
                preexec_fn=_parent_death_signal(),
            )
        finally:
            os.close(log_fd)
    except BaseException:
        if temporary:
            shutil.rmtree(path, ignore_errors=True)
        raise
    gateway = DevGateway(
        address=f"http://{HOST}:{port}", proxy_address=f"gateway://{HOST}:{proxy_port}",
        username=username, password=password, state_dir=path, pid=process.pid,
        process=process, temporary_state=temporary, gateway_workers=config.gateway_workers,
    )
    logger.info("dask-gateway-server started (pid %d) at %s, state in %s", process.pid,
                gateway.address, path)
    try:
        _wait_until_answering(gateway, start_timeout)
    except BaseException:
        gateway.stop()
        raise
    return gateway
