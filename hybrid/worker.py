"""The ``dask worker`` command a job runs, described as data.

:class:`WorkerOptions` holds everything the command needs; :meth:`WorkerOptions.argv` gives
the argument list (without ``--name``, which the job computes from its own batch job id).
Every template, batch or Kubernetes, runs this same command.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field
from urllib.parse import urlparse

from hybrid import config
from hybrid.annotator import resources_argument
from hybrid.errors import ConfigurationError

_PORT_RANGE = re.compile(r"^(\d{1,5})(?::(\d{1,5}))?$")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")


def check_name(value: str, field_name: str) -> str:
    """Names that land in job names, tags and worker names: ``[A-Za-z0-9._-]``, 1-63 chars."""
    if not isinstance(value, str) or not _NAME.match(value):
        raise ConfigurationError(
            field_name, value,
            "1-63 characters from A-Z a-z 0-9 . _ -, starting with a letter or digit",
        )
    return value


def parse_port_range(value: str | int | None, field_name: str) -> tuple[int, int] | None:
    """``"10000:10070"`` -> ``(10000, 10070)``; ``None`` stays ``None``."""
    if value is None:
        return None
    match = _PORT_RANGE.match(str(value).strip())
    accepted = 'a port "N" or a range "FIRST:LAST" with 1024 <= FIRST <= LAST <= 65535'
    if not match:
        raise ConfigurationError(field_name, value, accepted)
    first = int(match[1])
    last = int(match[2] or first)
    if not 1024 <= first <= last <= 65535:
        raise ConfigurationError(field_name, value, accepted)
    return first, last


@dataclass(frozen=True)
class TLSFiles:
    """Paths of the CA, certificate and key as the worker sees them."""

    ca: str
    cert: str
    key: str


@dataclass(frozen=True)
class ContainerOptions:
    """Run the worker inside ``<runtime> exec [--bind B]... <image>``."""

    image: str
    runtime: str = "apptainer"
    binds: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.image, str) or not self.image.strip():
            raise ConfigurationError("container.image", self.image, "a path or URI of an image")
        if self.runtime not in ("apptainer", "singularity"):
            raise ConfigurationError("container.runtime", self.runtime,
                                     '"apptainer" or "singularity"')
        for bind in self.binds:
            if not isinstance(bind, str) or not bind or "\n" in bind or "," in bind:
                raise ConfigurationError(
                    "container.binds", bind, '"SRC[:DEST[:OPTS]]" without commas or newlines'
                )

    def prefix(self) -> list[str]:
        """The ``apptainer exec ...`` words that go before the worker command."""
        words = [self.runtime, "exec"]
        for bind in self.binds:
            words += ["--bind", bind]
        return [*words, self.image]


@dataclass(frozen=True)
class WorkerOptions:
    """What the worker command needs, from the scheduler address to the container.

    ``launcher`` words go before the python command (``pixi run --manifest-path P``,
    ``conda run -p ENV``): the worker then runs inside that environment.
    """

    scheduler_address: str
    nthreads: int = 1
    memory_limit: int | None = None
    resources: dict[str, float] = field(default_factory=dict)
    tls: TLSFiles | None = None
    scheduler_sni: str | None = None
    nanny: bool = True
    worker_port: str | None = None
    nanny_port: str | None = None
    contact_address: str | None = None
    death_timeout: int = 60
    extra_args: tuple[str, ...] = ()
    python: str | None = None
    container: ContainerOptions | None = None
    launcher: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        address = urlparse(self.scheduler_address if "://" in self.scheduler_address
                           else f"tcp://{self.scheduler_address}")
        if address.scheme not in ("tcp", "tls", "ws", "wss", "ucx") or not address.hostname:
            raise ConfigurationError(
                "scheduler_address", self.scheduler_address, "an address like tls://host:8786"
            )
        if address.scheme == "tls" and self.tls is None:
            raise ConfigurationError(
                "tls", None, "CA, certificate and key files for a tls:// scheduler address"
            )
        if self.scheduler_sni is not None and address.scheme != "tls":
            raise ConfigurationError(
                "scheduler_sni", self.scheduler_sni, "an SNI only with a tls:// scheduler address"
            )
        parse_port_range(self.worker_port, "hybrid.worker.port-range")
        parse_port_range(self.nanny_port, "hybrid.worker.nanny-port-range")
        if self.contact_address is not None:
            contact = urlparse(self.contact_address)
            if not contact.hostname or not contact.port:
                raise ConfigurationError(
                    "hybrid.worker.contact-address", self.contact_address,
                    "an address with a port, like tls://203.0.113.5:10000",
                )
        if isinstance(self.death_timeout, bool) or not isinstance(self.death_timeout, int) or (
            self.death_timeout <= 0
        ):
            raise ConfigurationError("hybrid.worker.death-timeout", self.death_timeout,
                                     "a whole number of seconds > 0")
        for arg in self.extra_args:
            if not isinstance(arg, str) or "\n" in arg or "\0" in arg:
                raise ConfigurationError("worker_extra_args", arg, "strings without newlines")
        for word in self.launcher:
            if not isinstance(word, str) or not word or "\n" in word or "\0" in word:
                raise ConfigurationError("launcher", self.launcher,
                                         "non-empty words without newlines")

    @property
    def uses_nanny(self) -> bool:
        """A nanny cannot pass the SNI to the proxy, so an SNI means ``--no-nanny``."""
        return self.nanny and self.scheduler_sni is None

    @property
    def python_executable(self) -> str:
        """The python that runs ``-m dask worker``: configured, else container's, else ours."""
        if self.python:
            return self.python
        configured = config.get("worker.python", None)
        if configured:
            return str(configured)
        return "python3" if self.container else sys.executable

    def argv(self) -> list[str]:
        """The whole command, container prefix included, without ``--name``."""
        words = [self.python_executable, "-m", "dask", "worker", self.scheduler_address]
        words += ["--nthreads", str(self.nthreads)]
        if self.memory_limit:
            words += ["--memory-limit", str(self.memory_limit)]
        if self.resources:
            words += ["--resources", resources_argument(self.resources)]
        if self.tls:
            words += ["--tls-ca-file", self.tls.ca, "--tls-cert", self.tls.cert,
                      "--tls-key", self.tls.key]
        if self.scheduler_sni:
            words += ["--scheduler-sni", self.scheduler_sni]
        words.append("--nanny" if self.uses_nanny else "--no-nanny")
        if self.contact_address:
            contact = urlparse(self.contact_address)
            words += ["--listen-address", f"{contact.scheme}://0.0.0.0:{contact.port}",
                      "--contact-address", self.contact_address]
        elif self.worker_port:
            words += ["--worker-port", str(self.worker_port)]
        if self.uses_nanny and self.nanny_port:
            words += ["--nanny-port", str(self.nanny_port)]
        words += ["--death-timeout", str(self.death_timeout)]
        words += list(self.extra_args)
        words = list(self.launcher) + words  # e.g. pixi run ... / conda run ...
        if self.container:
            words = self.container.prefix() + words
        return words


def default_worker_settings() -> dict:
    """The ``hybrid.worker`` settings that :class:`WorkerOptions` takes from configuration."""
    container = config.get("worker.container", {}) or {}
    image = container.get("image")
    return {
        "death_timeout": int(config.get("worker.death-timeout")),
        "worker_port": config.get("worker.port-range", None),
        "nanny_port": config.get("worker.nanny-port-range", None),
        "contact_address": config.get("worker.contact-address", None),
        "nanny": bool(config.get("worker.nanny", True)),
        "extra_args": tuple(config.get("worker.extra-args", []) or ()),
        "container": ContainerOptions(
            image=image, runtime=container.get("runtime", "apptainer"),
            binds=tuple(container.get("binds", []) or ()),
        ) if image else None,
    }
