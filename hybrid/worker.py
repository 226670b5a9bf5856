"""The ``dask worker`` command a job runs, from a pool and the way to its scheduler.

:func:`worker_command` gives a :class:`WorkerCommand`: the words before python (container,
pixi or conda), the python itself (or ``None``: the job looks ``python3`` up on ``PATH`` after
the user's setup commands) and the worker's arguments, without ``--name`` (the job computes
it from its own batch job id). Every template, batch or Kubernetes, runs this same command.
The worker starts through ``python -m distributed.cli.dask_worker``, which loads only what a
worker needs (``python -m dask worker`` would import every ``dask`` CLI plugin first), and
without its own dashboard unless ``worker_extra_args`` ask for it (``--dashboard``). A worker
whose scheduler is on loopback listens on loopback only (``loopback_host``).
A pool with a walltime and a lifetime (:mod:`hybrid.lifetimes`) gives its workers
distributed's ``--lifetime`` shortly before the walltime, as a safety net: the pool manager
drains each worker at the end of its lifetime, earlier.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from hybrid.errors import ConfigurationError
from hybrid.gpusharing import layout, starts_mps, variants
from hybrid.routing import resources_argument
from hybrid.workerargs import split_resources

if TYPE_CHECKING:
    from hybrid.pools import PoolSpec

#: The module every worker runs.
WORKER_MODULE = "distributed.cli.dask_worker"


@dataclass(frozen=True)
class TLSFiles:
    """The CA, certificate and key: paths as a worker sees them, or, as the source a
    :class:`Connection` carries, each a path on this host or the PEM text itself."""

    ca: str
    cert: str
    key: str

    def __repr__(self) -> str:  # PEM text (the key!) is not shown, as distributed's Security
        def shown(source: str) -> str:
            return "'<PEM text>'" if "-----BEGIN" in source else repr(source)

        return f"TLSFiles(ca={shown(self.ca)}, cert={shown(self.cert)}, key={shown(self.key)})"


def read_pem(source: str) -> bytes:
    """The PEM bytes of a TLS source: the text itself, or the file it names."""
    if "-----BEGIN" in source:
        return source.encode()
    try:
        return Path(source).read_bytes()
    except OSError as error:
        raise ConfigurationError("tls", source, "PEM text or a readable certificate or key "
                                 f"file ({error.strerror})") from None


@dataclass(frozen=True)
class Connection:
    """How a cluster's workers reach its scheduler: address, TLS material, SNI.

    ``tls`` holds the CA, certificate and key as PEM text or paths on this host (nothing is
    written until a submission stages them); each system decides where its jobs find them.
    """

    scheduler_address: str
    tls: TLSFiles | None = None
    sni: str | None = None
    #: What the caller calls the address, the TLS files and the SNI (errors name these).
    labels: tuple[str, str, str] = field(default=("scheduler_address", "tls", "scheduler_sni"),
                                         compare=False, repr=False)

    def __post_init__(self) -> None:
        from hybrid.fields import Address, is_host, validate_value

        address_label, tls_label, sni_label = self.labels
        checked = validate_value(Address, self.scheduler_address, address_label)
        object.__setattr__(self, "scheduler_address", checked)
        if checked.startswith("tls://") and self.tls is None:
            raise ConfigurationError(
                tls_label, None, "CA, certificate and key files for a tls:// scheduler address")
        if self.sni is not None and not is_host(self.sni):
            raise ConfigurationError(sni_label, self.sni, "a host name, e.g. daskgateway-NAME "
                                     "(the name a gateway's proxy routes by)")
        if self.sni is not None and not checked.startswith("tls://"):
            raise ConfigurationError(sni_label, self.sni,
                                     "an SNI only with a tls:// scheduler address",
                                     "Leave the SNI out, or use a tls:// scheduler address.")

    def check_pool(self, spec: PoolSpec, field: str) -> None:
        """Refuse a pool these workers cannot run: a nanny cannot pass the SNI."""
        if self.sni is not None and spec.processes > 1:
            raise ConfigurationError(
                f"{field}.processes", spec.processes,
                "1 behind a gateway's proxy: several processes per job need a nanny, and a "
                "nanny cannot pass the SNI the proxy routes by")
        if self.sni is not None and spec.gpus and spec.gpu_sharing_mode == "processes" and (
                spec.max_processes > 1):
            raise ConfigurationError(
                f"{field}.gpu_sharing_mode", spec.gpu_sharing_mode,
                "'threads' behind a gateway's proxy: several worker processes per job need a "
                "nanny, and a nanny cannot pass the SNI the proxy routes by")


@dataclass(frozen=True)
class WorkerCommand:
    """The worker's command line in three parts (see the module's docstring)."""

    prefix: tuple[str, ...]
    python: str | None
    arguments: tuple[str, ...]

    def argv(self, python: str = "python3") -> list[str]:
        """The whole command, with ``python`` where the job would look it up."""
        return [*self.prefix, self.python or python, *self.arguments]


def worker_python(spec: PoolSpec) -> str | None:
    """The python that runs the worker, or ``None`` to look it up in the job (see
    :attr:`~hybrid.pools.PoolSpec.python`)."""
    from hybrid import config

    if spec.python:
        return spec.python
    if spec.container_image or spec.launcher():
        return "python"
    configured = config.get("worker.python", None)
    if configured:
        return str(configured)
    if spec.job_script_prologue:
        return None
    return sys.executable


def wants_dashboard(extra_args: tuple[str, ...] | list[str]) -> bool:
    """Whether ``worker_extra_args`` ask for the worker's dashboard (off by default: batch
    workers are reached through the scheduler's, and importing it costs a third of a
    worker's start-up)."""
    return any(arg == "--dashboard" or arg.startswith("--dashboard-address")
               for arg in extra_args)


def memory_watch(spec: PoolSpec, connection: Connection) -> tuple[int, str] | None:
    """The resident memory (KiB) past which a worker WITHOUT a nanny is killed by its job
    script, and that share of its limit as text; ``None`` where a nanny watches (or nothing
    should: no memory limit, or ``distributed.worker.memory.terminate: false``).

    The share is Dask's own ``distributed.worker.memory.terminate`` (0.95), as the workers
    see it: ``hybrid.worker-dask-config`` if it sets the key, else this process's setting.
    """
    import dask

    from hybrid import config

    nanny = spec.uses_nanny and connection.sni is None
    if nanny or not spec.memory_per_worker:
        return None
    exported = config.get("worker-dask-config", {}) or {}
    share = exported.get("distributed.worker.memory.terminate",
                         dask.config.get("distributed.worker.memory.terminate", 0.95))
    if share is False or share is None or share == "false":
        return None
    try:
        fraction = float(share)
    except (TypeError, ValueError):
        raise ConfigurationError("distributed.worker.memory.terminate", share,
                                 "a fraction of the memory limit, or false") from None
    if not 0 < fraction <= 1:
        raise ConfigurationError("distributed.worker.memory.terminate", share,
                                 "a fraction in (0, 1], or false")
    return int(spec.memory_per_worker * fraction) // 1024, f"{fraction:g}"


def loopback_host(address: str) -> str | None:
    """The loopback host to listen on for workers whose scheduler is ``address``, when
    that is a loopback address (``None`` otherwise): such workers run on the scheduler's
    machine and only it talks to them, so they listen there alone, not on every
    interface of a (maybe shared) node, as ``dask worker`` would by default."""
    import ipaddress

    from distributed.comm.addressing import get_address_host

    try:
        host = get_address_host(address)
    except ValueError:
        return None
    if host == "localhost":
        return "127.0.0.1"
    try:
        return host if ipaddress.ip_address(host).is_loopback else None
    except ValueError:
        return None


def worker_command(spec: PoolSpec, connection: Connection, tls: TLSFiles | None,
                   uses_nanny: bool | None = None,
                   tasks_per_gpu: int | None = None,
                   listen_host: str | None = None) -> WorkerCommand:
    """The command a worker job of ``spec`` runs; ``tls``: the files as the job sees them;
    ``tasks_per_gpu``: a GPU pool's sharing (default: without an MPS daemon, see
    :mod:`hybrid.gpusharing`); ``listen_host``: where the worker and its HTTP server listen
    (default: ``loopback_host`` of the scheduler's address; ``None`` from it: every
    interface), unless ``worker_extra_args`` or a contact address say it."""
    shape = layout(spec, tasks_per_gpu, nanny_possible=connection.sni is None)
    if uses_nanny is not None:
        nanny = uses_nanny
    else:
        nanny = spec.nanny if spec.nanny is not None else shape.processes > 1
    if shape.processes > 1:
        nanny = True  # checked by PoolSpec: only a nanny runs several workers
    if connection.sni is not None:
        nanny = False  # a nanny cannot pass the SNI to the gateway's proxy
    words = ["-m", WORKER_MODULE, connection.scheduler_address,
             "--nthreads", str(shape.threads)]
    if shape.processes > 1:
        words += ["--nworkers", str(shape.processes)]
    if shape.memory:
        words += ["--memory-limit", str(shape.memory)]
    extra_resources, extra_args = split_resources(spec.worker_extra_args)
    words += ["--resources", resources_argument({**shape.resources, **extra_resources})]
    if tls is not None:
        words += ["--tls-ca-file", tls.ca, "--tls-cert", tls.cert, "--tls-key", tls.key]
    if connection.sni:
        words += ["--scheduler-sni", connection.sni]
    words.append("--nanny" if nanny else "--no-nanny")
    if not wants_dashboard(spec.worker_extra_args):
        words.append("--no-dashboard")  # bokeh and its web app: a third of the start-up
    if spec.contact_address:
        from distributed.comm.addressing import parse_address, parse_host_port

        scheme, location = parse_address(spec.contact_address)
        words += ["--listen-address", f"{scheme}://0.0.0.0:{parse_host_port(location)[1]}",
                  "--contact-address", spec.contact_address]
    elif spec.worker_port:
        words += ["--worker-port", spec.worker_port]
    host = listen_host or loopback_host(connection.scheduler_address)
    given = {arg.split("=", 1)[0] for arg in spec.worker_extra_args}
    if host and not spec.contact_address and not given & {
            "--host", "--listen-address", "--interface"}:
        words += ["--host", host]
    if host and "--dashboard-address" not in given:  # its HTTP server (health, metrics)
        from distributed.comm.addressing import unparse_host_port

        words += ["--dashboard-address", unparse_host_port(host, 0)]
    if nanny and spec.nanny_port:
        words += ["--nanny-port", spec.nanny_port]
    words += ["--death-timeout", str(spec.death_timeout)]
    deadline = spec.worker_deadline_seconds()
    if deadline is not None:  # the safety net: the pool manager drains the worker earlier
        words += ["--lifetime", f"{deadline:g}s", "--lifetime-stagger", "0s"]
    words += extra_args
    return WorkerCommand(prefix=(*spec.container_prefix(), *spec.launcher()),
                         python=worker_python(spec), arguments=tuple(words))


def worker_commands(spec: PoolSpec, connection: Connection, tls: TLSFiles | None,
                    listen_host: str | None = None
                    ) -> tuple[WorkerCommand, WorkerCommand | None]:
    """The worker command without an MPS daemon, and the one under it where a GPU pool's job
    starts or finds one and that changes the command (``None`` otherwise)."""
    plain = worker_command(spec, connection, tls, listen_host=listen_host)
    if not starts_mps(spec):
        return plain, None
    shared = worker_command(spec, connection, tls, tasks_per_gpu=variants(spec)[1],
                            listen_host=listen_host)
    return plain, (shared if shared != plain else None)
