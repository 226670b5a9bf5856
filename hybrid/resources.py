"""Worker resources, with the names openff-evaluator's Dask backends use.

Every class validates on construction (one :class:`~hybrid.errors.ConfigurationError` naming
the field, the value and what is accepted), compares by value, and round-trips exactly
through :meth:`to_dict`/:meth:`from_dict`, JSON and pickle.
"""

from __future__ import annotations

import json
from enum import Enum
from typing import Any, ClassVar

import pint

from hybrid.errors import ConfigurationError
from hybrid.units import (
    MAX_BYTES,
    Quantity,
    parse_memory,
    parse_walltime,
    to_bytes,
    walltime_seconds,
)

__all__ = [
    "ComputeResources",
    "GPUPrecision",
    "GPUToolkit",
    "PodResources",
    "QueueWorkerResources",
]


class GPUToolkit(str, Enum):
    """The GPU toolkit a worker's tasks should use."""

    CUDA = "CUDA"
    OpenCL = "OpenCL"
    auto = "auto"


class GPUPrecision(str, Enum):
    """The floating point precision GPU tasks should run in."""

    single = "single"
    mixed = "mixed"
    double = "double"


def _enum(enum: type[Enum], value: Any, field: str, allow_none: bool) -> Enum | None:
    if value is None and allow_none:
        return None
    if isinstance(value, enum):
        return value
    if isinstance(value, str):
        for member in enum:
            if member.value.lower() == value.strip().lower():
                return member
    names = ", ".join(repr(m.value) for m in enum)
    raise ConfigurationError(field, value, f"one of {names} (or {enum.__name__}.<name>)")


#: The most threads and GPUs one worker's job may have (as a pool's ``cores``/``gpus``).
MAX_THREADS = 1024
MAX_GPUS = 64
#: The most pods one group may have (as ``hybrid submit --count``).
MAX_WORKERS = 100_000


def _count(value: Any, field: str, minimum: int = 0, maximum: int = MAX_THREADS) -> int:
    accepted = f"an integer >= {minimum}, at most {maximum}"
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        else:
            raise ConfigurationError(field, value, accepted)
    if not minimum <= value <= maximum:
        raise ConfigurationError(field, value, accepted)
    return value


def _json_object(text: Any, field: str) -> dict[str, Any]:
    """The JSON object ``text`` holds (a resource object's :meth:`to_json`)."""
    accepted = ('the JSON text of a resource object\'s to_json(), an object such as '
                '{"type": "ComputeResources", "number_of_threads": 2}')
    try:
        data = json.loads(text)
    except (TypeError, ValueError):
        raise ConfigurationError(field, text, accepted) from None
    if not isinstance(data, dict):
        raise ConfigurationError(field, text, accepted)
    return data


def _quantity_text(quantity: pint.Quantity) -> str:
    magnitude = quantity.magnitude
    if hasattr(magnitude, "item"):  # numpy scalars: their repr is not a number pint reads
        magnitude = magnitude.item()
    return f"{magnitude!r} {quantity.units}"


class _Resources:
    """Shared machinery: declared fields, validation, equality, serialisation."""

    #: Field names, in constructor order.
    _fields: ClassVar[tuple[str, ...]] = ()
    _memory_fields: ClassVar[tuple[str, ...]] = ()

    GPUToolkit = GPUToolkit
    GPUPrecision = GPUPrecision

    def _validate_gpu(self) -> None:
        name = type(self).__name__
        self.number_of_gpus = _count(self.number_of_gpus, f"{name}.number_of_gpus", 0,
                                     MAX_GPUS)
        self.preferred_gpu_toolkit = _enum(
            GPUToolkit, self.preferred_gpu_toolkit, f"{name}.preferred_gpu_toolkit", True
        )
        self.preferred_gpu_precision = _enum(
            GPUPrecision, self.preferred_gpu_precision, f"{name}.preferred_gpu_precision", True
        )
        if self.number_of_gpus > 0 and self.preferred_gpu_toolkit is None:
            raise ConfigurationError(
                f"{name}.preferred_gpu_toolkit",
                None,
                "a GPUToolkit (CUDA, OpenCL or auto) when number_of_gpus > 0",
            )

    @property
    def is_gpu(self) -> bool:
        """True when this describes GPU workers."""
        return self.number_of_gpus > 0

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict; :meth:`from_dict` rebuilds an equal object."""
        out: dict[str, Any] = {}
        for field in self._fields:
            value = getattr(self, field)
            if isinstance(value, Enum):
                value = value.value
            elif isinstance(value, pint.Quantity):
                value = _quantity_text(value)
            out[field] = value
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]):
        """Rebuild from :meth:`to_dict` output (unknown keys are an error)."""
        if not isinstance(data, dict):
            raise ConfigurationError(cls.__name__, data,
                                     f"a dict of {', '.join(cls._fields)}")
        unknown = set(data) - set(cls._fields)
        if unknown:
            raise ConfigurationError(
                f"{cls.__name__}", sorted(unknown), f"only the fields {', '.join(cls._fields)}"
            )
        return cls(**data)

    def to_json(self) -> str:
        """JSON text of :meth:`to_dict`."""
        return json.dumps({"type": type(self).__name__, **self.to_dict()}, sort_keys=True)

    @classmethod
    def from_json(cls, text: str):
        """Rebuild from :meth:`to_json` output."""
        data = _json_object(text, f"{cls.__name__}.from_json(text)")
        kind = data.pop("type", cls.__name__)
        if kind != cls.__name__:
            raise ConfigurationError("type", kind, f"{cls.__name__!r} JSON")
        return cls.from_dict(data)

    def __getstate__(self) -> dict[str, Any]:
        return self.to_dict()

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(**state)

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return all(self._comparable(f) == other._comparable(f) for f in self._fields)

    def _comparable(self, field: str) -> Any:
        value = getattr(self, field)
        if field in self._memory_fields and value is not None:
            return to_bytes(value)
        return value

    def __hash__(self) -> int:
        return hash(json.dumps([self._comparable(f) for f in self._fields], sort_keys=True,
                               default=str))

    def __repr__(self) -> str:
        args = ", ".join(f"{f}={v!r}" for f, v in self.to_dict().items())
        return f"{type(self).__name__}({args})"


class ComputeResources(_Resources):
    """What one worker offers: threads and GPUs.

    ``number_of_gpus > 0`` needs a ``preferred_gpu_toolkit`` (CUDA by default).
    """

    _fields = (
        "number_of_threads",
        "number_of_gpus",
        "preferred_gpu_toolkit",
        "preferred_gpu_precision",
    )

    def __init__(
        self,
        number_of_threads: int = 1,
        number_of_gpus: int = 0,
        preferred_gpu_toolkit: GPUToolkit | str | None = GPUToolkit.CUDA,
        preferred_gpu_precision: GPUPrecision | str | None = GPUPrecision.mixed,
    ):
        self.number_of_threads = _count(
            number_of_threads, f"{type(self).__name__}.number_of_threads", 1
        )
        self.number_of_gpus = number_of_gpus
        self.preferred_gpu_toolkit = preferred_gpu_toolkit
        self.preferred_gpu_precision = preferred_gpu_precision
        self._validate_gpu()


class QueueWorkerResources(ComputeResources):
    """A batch job's worker: threads, GPUs, memory per thread and a wall time ``"HH:MM"``."""

    _fields = (*ComputeResources._fields, "per_thread_memory_limit", "wallclock_time_limit")
    _memory_fields = ("per_thread_memory_limit",)

    def __init__(
        self,
        number_of_threads: int = 1,
        number_of_gpus: int = 0,
        preferred_gpu_toolkit: GPUToolkit | str | None = GPUToolkit.CUDA,
        preferred_gpu_precision: GPUPrecision | str | None = GPUPrecision.mixed,
        per_thread_memory_limit: Any = "1 GiB",
        wallclock_time_limit: Any = "01:00",
    ):
        super().__init__(
            number_of_threads, number_of_gpus, preferred_gpu_toolkit, preferred_gpu_precision
        )
        self.per_thread_memory_limit = parse_memory(
            per_thread_memory_limit, "QueueWorkerResources.per_thread_memory_limit"
        )
        if to_bytes(self.per_thread_memory_limit) == 0:
            raise ConfigurationError(
                "QueueWorkerResources.per_thread_memory_limit",
                per_thread_memory_limit,
                "a memory larger than zero",
            )
        if self.memory_bytes > MAX_BYTES:
            raise ConfigurationError(
                "QueueWorkerResources.per_thread_memory_limit", per_thread_memory_limit,
                f"a memory that, times number_of_threads ({self.number_of_threads}), is at "
                "most 1 PiB per job",
            )
        self.wallclock_time_limit = parse_walltime(
            wallclock_time_limit, "QueueWorkerResources.wallclock_time_limit"
        )

    @property
    def memory_bytes(self) -> int:
        """Memory of the whole job: threads times the per-thread limit, in bytes."""
        return self.number_of_threads * to_bytes(self.per_thread_memory_limit)

    @property
    def wallclock_seconds(self) -> int:
        """The wall time in seconds."""
        return walltime_seconds(self.wallclock_time_limit)


class PodResources(_Resources):
    """A group of Kubernetes worker pods: how many, and what each pod gets."""

    _fields = (
        "minimum_number_of_workers",
        "maximum_number_of_workers",
        "number_of_threads",
        "memory_limit",
        "ephemeral_storage_limit",
        "number_of_gpus",
        "preferred_gpu_toolkit",
        "preferred_gpu_precision",
        "affinity_specification",
        "tolerations",
    )
    _memory_fields = ("memory_limit", "ephemeral_storage_limit")

    def __init__(
        self,
        minimum_number_of_workers: int = 1,
        maximum_number_of_workers: int = 1,
        number_of_threads: int = 1,
        memory_limit: Any = "4 GiB",
        ephemeral_storage_limit: Any = "20 GiB",
        number_of_gpus: int = 0,
        preferred_gpu_toolkit: GPUToolkit | str | None = GPUToolkit.CUDA,
        preferred_gpu_precision: GPUPrecision | str | None = GPUPrecision.mixed,
        affinity_specification: dict[str, Any] | None = None,
        tolerations: list[dict[str, Any]] | None = None,
    ):
        self.minimum_number_of_workers = _count(
            minimum_number_of_workers, "PodResources.minimum_number_of_workers", 0, MAX_WORKERS
        )
        self.maximum_number_of_workers = _count(
            maximum_number_of_workers, "PodResources.maximum_number_of_workers", 1, MAX_WORKERS
        )
        if self.minimum_number_of_workers > self.maximum_number_of_workers:
            raise ConfigurationError(
                "PodResources.minimum_number_of_workers",
                minimum_number_of_workers,
                f"at most maximum_number_of_workers ({maximum_number_of_workers})",
            )
        self.number_of_threads = _count(number_of_threads, "PodResources.number_of_threads", 1)
        self.memory_limit = parse_memory(memory_limit, "PodResources.memory_limit")
        if to_bytes(self.memory_limit) == 0:
            raise ConfigurationError("PodResources.memory_limit", memory_limit,
                                     "a memory larger than zero (a pod without a memory "
                                     "limit may take a node's whole memory)")
        self.ephemeral_storage_limit = parse_memory(
            ephemeral_storage_limit, "PodResources.ephemeral_storage_limit"
        )
        self.number_of_gpus = number_of_gpus
        self.preferred_gpu_toolkit = preferred_gpu_toolkit
        self.preferred_gpu_precision = preferred_gpu_precision
        self._validate_gpu()
        if affinity_specification is not None and not isinstance(affinity_specification, dict):
            raise ConfigurationError(
                "PodResources.affinity_specification",
                affinity_specification,
                "a Kubernetes affinity mapping (dict) or None",
            )
        self.affinity_specification = affinity_specification
        if tolerations is not None and not (
            isinstance(tolerations, list) and all(isinstance(t, dict) for t in tolerations)
        ):
            raise ConfigurationError(
                "PodResources.tolerations", tolerations, "a list of Kubernetes toleration dicts"
            )
        self.tolerations = tolerations

    @property
    def memory_bytes(self) -> int:
        """Memory limit of one pod in bytes."""
        return to_bytes(self.memory_limit)


def resources_from_json(text: str) -> _Resources:
    """Rebuild any resource object from its :meth:`to_json` text."""
    kind = _json_object(text, "resources_from_json(text)").get("type")
    classes = {c.__name__: c for c in (ComputeResources, QueueWorkerResources, PodResources)}
    if kind not in classes:
        raise ConfigurationError("type", kind, f"one of {', '.join(classes)}")
    return classes[kind].from_json(text)


# Keep Quantity importable from here for users of openff-evaluator's layout.
__all__ += ["Quantity", "resources_from_json"]
