"""Worker resources, with openff-evaluator's classes, arguments and positional order.

Each class is one pydantic model: every value is checked by one validator on construction
(one :class:`~hybrid.errors.ConfigurationError` naming the field, the value and what is
accepted, raised through ``hybrid.fields.configuration_error``), objects are immutable,
compare by value (memories in bytes), and round-trip exactly through :meth:`to_dict` /
:meth:`from_dict`, JSON and pickle. Memories and wall times take quantities of any pint
registry (openff-units' included), pint's strings (``"8 GiB"``) and, for wall times,
``"HH:MM"``.
"""

from __future__ import annotations

import inspect
import json
from enum import Enum
from typing import Annotated, Any, ClassVar

import pint
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PlainSerializer,
    PlainValidator,
    ValidationError,
    model_validator,
)

from hybrid.errors import ConfigurationError
from hybrid.fields import configuration_error, count, reject, resource_limits
from hybrid.units import MAX_BYTES, Quantity, parse_memory, parse_walltime, to_bytes
from hybrid.units import walltime_seconds as _walltime_seconds

__all__ = [
    "ComputeResources",
    "GPUPrecision",
    "GPUToolkit",
    "PodResources",
    "Quantity",
    "QueueWorkerResources",
    "resources_from_json",
]

#: The most threads and GPUs one worker's job may have (as a pool's ``cores``/``gpus``).
MAX_THREADS = 1024
MAX_GPUS = 64
#: The most pods one group may have, and jobs one pool (``scale``, ``adapt``, ``hybrid submit
#: --count``).
MAX_WORKERS = 100_000


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


# --------------------------------------------------------------------------- field types
def _whole(minimum: int, maximum: int) -> Any:
    """An integer in ``[minimum, maximum]`` (a whole float is taken, booleans are not)."""
    return count(minimum, maximum, f"an integer >= {minimum}, at most {maximum}")


def _member(enum: type[Enum]) -> Any:
    """A member of ``enum``, its value as a string in any case, or ``None``."""
    accepted = (f"one of {', '.join(repr(m.value) for m in enum)} "
                f"(or {enum.__name__}.<name>)")

    def check(value: Any) -> Enum | None:
        if value is None or isinstance(value, enum):
            return value
        if isinstance(value, str):
            for member in enum:
                if member.value.lower() == value.strip().lower():
                    return member
        raise reject(accepted)

    return Annotated[enum | None, PlainValidator(check),
                     PlainSerializer(lambda m: None if m is None else m.value)]


def _quantity_text(quantity: pint.Quantity) -> str:
    magnitude = quantity.magnitude
    if hasattr(magnitude, "item"):  # numpy scalars: their repr is not a number pint reads
        magnitude = magnitude.item()
    return f"{magnitude!r} {quantity.units}"


def _memory(zero: str | None = None, per_thread: bool = False) -> Any:
    """A memory quantity in :data:`hybrid.units.unit`; ``zero``: why zero is refused;
    ``per_thread``: times the threads validated before it, at most 1 PiB."""

    def check(value: Any, info: Any) -> pint.Quantity:
        try:
            quantity = parse_memory(value, "memory")
        except ConfigurationError as error:
            raise reject(error.accepted, error.fix) from None  # ("Did you mean ...")
        if zero is not None and to_bytes(quantity) == 0:
            raise reject(zero)
        threads = info.data.get("number_of_threads")
        if per_thread and threads and threads * to_bytes(quantity) > MAX_BYTES:
            raise reject(f"a memory that, times number_of_threads ({threads}), is at most "
                         "1 PiB per job")
        return quantity

    return Annotated[pint.Quantity, PlainValidator(check),
                     PlainSerializer(_quantity_text, return_type=str)]


def _walltime(value: Any) -> str:
    try:
        return parse_walltime(value, "walltime", hh_mm_only=True)  # as openff-evaluator
    except ConfigurationError as error:
        raise reject(error.accepted, error.fix) from None  # (YAML's 12:00 read as 720)


def _optional(kind: type, accepted: str, item: type | None = None) -> Any:
    """``None``, or a ``kind`` (a dict or a list; a list's items each an ``item``)."""

    def check(value: Any) -> Any:
        if value is not None and not (isinstance(value, kind) and (
                item is None or all(isinstance(i, item) for i in value))):
            raise reject(accepted)
        return value

    return Annotated[kind | None, PlainValidator(check)]


Threads = _whole(1, MAX_THREADS)
Gpus = _whole(0, MAX_GPUS)
Toolkit = _member(GPUToolkit)
Precision = _member(GPUPrecision)


# --------------------------------------------------------------------------- the models
class _Resources(BaseModel):
    """The shared machinery: openff-evaluator's positional constructor, equality by value,
    plain-data round trips, and errors as :class:`~hybrid.errors.ConfigurationError`.

    The fields, in declaration order (a subclass's after its base's), are the positional
    parameters; a field declared ``Field(kw_only=True)`` (hybrid's own) is keyword-only.
    """

    model_config = ConfigDict(frozen=True, validate_default=True, extra="forbid")

    GPUToolkit: ClassVar[type[GPUToolkit]] = GPUToolkit
    GPUPrecision: ClassVar[type[GPUPrecision]] = GPUPrecision
    #: Fields holding a memory (compared in bytes).
    _memory_fields: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        fields = cls.model_fields.items()
        parameters = [inspect.Parameter(
            name, inspect.Parameter.KEYWORD_ONLY if info.kw_only else
            inspect.Parameter.POSITIONAL_OR_KEYWORD, default=info.default,
            annotation=info.annotation) for name, info in fields]
        cls.__signature__ = inspect.Signature(sorted(parameters, key=lambda p: p.kind))

    def __init__(self, *args: Any, **kwargs: Any):
        try:
            given = inspect.signature(type(self)).bind(*args, **kwargs).arguments
        except TypeError as error:
            raise TypeError(f"{type(self).__name__}(): {error}") from None
        try:
            super().__init__(**given)
        except ValidationError as error:
            raise configuration_error(error, prefix=f"{type(self).__name__}.") from None

    @property
    def is_gpu(self) -> bool:
        """True when this describes GPU workers."""
        return self.number_of_gpus > 0

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict; :meth:`from_dict` rebuilds an equal object."""
        return self.model_dump(mode="json")

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Any:
        """Rebuild from :meth:`to_dict` output (unknown keys are an error)."""
        fields = ", ".join(cls.model_fields)
        if not isinstance(data, dict):
            raise ConfigurationError(cls.__name__, data, f"a dict of {fields}")
        unknown = set(data) - set(cls.model_fields)
        if unknown:
            raise ConfigurationError(cls.__name__, sorted(unknown), f"only the fields {fields}")
        return cls(**data)

    def to_json(self) -> str:
        """JSON text of :meth:`to_dict`, with the class's name as ``"type"``."""
        return json.dumps({"type": type(self).__name__, **self.to_dict()}, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Any:
        """Rebuild from :meth:`to_json` output."""
        data = _json_object(text, f"{cls.__name__}.from_json(text)")
        kind = data.pop("type", cls.__name__)
        if kind != cls.__name__:
            raise ConfigurationError("type", kind, f"{cls.__name__!r} JSON")
        return cls.from_dict(data)

    def __reduce__(self) -> Any:
        # As plain data: a pint quantity unpickles into pint's application registry, which
        # is another one once openff-units is imported.
        return type(self).from_dict, (self.to_dict(),)

    def _key(self) -> str:
        state = self.to_dict()
        state.update({f: to_bytes(getattr(self, f)) for f in self._memory_fields})
        return json.dumps(state, sort_keys=True)

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())


class ComputeResources(_Resources):
    """What one worker offers: threads and GPUs.

    ``number_of_gpus > 0`` needs a ``preferred_gpu_toolkit`` (CUDA by default).
    """

    number_of_threads: Threads = 1
    number_of_gpus: Gpus = 0
    preferred_gpu_toolkit: Toolkit = GPUToolkit.CUDA
    preferred_gpu_precision: Precision = GPUPrecision.mixed

    @model_validator(mode="after")
    def _toolkit_for_gpus(self) -> ComputeResources:
        if self.number_of_gpus > 0 and self.preferred_gpu_toolkit is None:
            raise reject("a GPUToolkit (CUDA, OpenCL or auto) when number_of_gpus > 0",
                         field="preferred_gpu_toolkit", value=None)
        return self


class QueueWorkerResources(ComputeResources):
    """A batch job's worker: threads, GPUs, memory per thread and a wall time ``"HH:MM"``."""

    _memory_fields = ("per_thread_memory_limit",)

    per_thread_memory_limit: _memory("a memory larger than zero", per_thread=True) = "1 GiB"
    wallclock_time_limit: Annotated[str, PlainValidator(_walltime)] = "01:00"

    @property
    def memory_bytes(self) -> int:
        """Memory of the whole job: threads times the per-thread limit, in bytes."""
        return self.number_of_threads * to_bytes(self.per_thread_memory_limit)

    @property
    def wallclock_seconds(self) -> int:
        """The wall time in seconds."""
        return _walltime_seconds(self.wallclock_time_limit)


class PodResources(ComputeResources):
    """A group of Kubernetes worker pods: what each pod gets, and how many there are.

    ``additional_limit_specifications`` adds resources to each pod's requests and limits
    (``{"nvidia.com/mig-1g.5gb": 1}``); ``tolerations`` (hybrid's own, keyword-only) are the
    pods' Kubernetes tolerations.
    """

    _memory_fields = ("memory_limit", "ephemeral_storage_limit")

    memory_limit: _memory("a memory larger than zero (a pod without a memory limit may take "
                          "a node's whole memory)") = "4 GiB"
    ephemeral_storage_limit: _memory() = "20 GiB"
    additional_limit_specifications: Annotated[dict[str, str] | None, PlainValidator(
        lambda value: None if value is None else resource_limits(value))] = None
    affinity_specification: _optional(dict, "a Kubernetes affinity mapping (dict) or None") = None
    minimum_number_of_workers: _whole(0, MAX_WORKERS) = 1
    maximum_number_of_workers: _whole(1, MAX_WORKERS) = 1
    tolerations: _optional(list, "a list of Kubernetes toleration dicts", dict) = Field(
        None, kw_only=True)

    @model_validator(mode="after")
    def _minimum_at_most_maximum(self) -> PodResources:
        if self.minimum_number_of_workers > self.maximum_number_of_workers:
            raise reject(f"at most maximum_number_of_workers ({self.maximum_number_of_workers})",
                         field="minimum_number_of_workers",
                         value=self.minimum_number_of_workers)
        return self

    @property
    def memory_bytes(self) -> int:
        """Memory limit of one pod in bytes."""
        return to_bytes(self.memory_limit)


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


def resources_from_json(text: str) -> _Resources:
    """Rebuild any resource object from its :meth:`to_json` text."""
    kind = _json_object(text, "resources_from_json(text)").get("type")
    classes = {c.__name__: c for c in (ComputeResources, QueueWorkerResources, PodResources)}
    if kind not in classes:
        raise ConfigurationError("type", kind, f"one of {', '.join(classes)}")
    return classes[kind].from_json(text)
