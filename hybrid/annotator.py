"""The resource annotator: GPU tasks go to GPU workers, every other task to CPU workers.

A task is a GPU task only by explicit metadata: the :func:`gpu_task` decorator on its
function, the ``gpu_task=True`` keyword of :meth:`ResourceAnnotator.submit`, or the
:func:`gpu_tasks` context (a ``dask.annotate``). Task contents are never inspected.

GPU tasks ask for ``{"GPU": fraction}`` (``hybrid.annotator.gpu-fraction``, 0.5 so that two
share one GPU); every other task asks for ``{"notGPU": 1}``. GPU workers advertise
``GPU=<gpus> notGPU=0`` and CPU workers ``GPU=0 notGPU=<threads>``
(:func:`worker_resources`), so neither kind of task can land on the other kind of worker.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import dask
from dask.delayed import Delayed
from dask.highlevelgraph import HighLevelGraph, MaterializedLayer
from distributed import Client, Future

from hybrid import config
from hybrid.errors import ConfigurationError
from hybrid.routing import (
    GPU,
    NOT_GPU,
    gpu_fraction,
    resources_argument,
    task_resources,
    worker_resources,
)

_MARK = "__hybrid_gpu_task__"

F = TypeVar("F", bound=Callable[..., Any])

__all__ = [
    "GPU",
    "NOT_GPU",
    "HybridClient",
    "ResourceAnnotator",
    "gpu_fraction",
    "gpu_task",
    "gpu_tasks",
    "is_gpu_task",
    "resources_argument",
    "task_resources",
    "worker_resources",
]


def gpu_task(function: F) -> F:
    """Mark ``function`` as a GPU task (a decorator). The function itself is unchanged."""
    if not callable(function):
        raise ConfigurationError("gpu_task", function, "a callable to mark as a GPU task")
    try:
        setattr(function, _MARK, True)
    except (AttributeError, TypeError):
        raise ConfigurationError(
            "gpu_task", function,
            "a function whose attributes can be set: put @gpu_task below @dask.delayed",
        ) from None
    return function


def is_gpu_task(function: Any) -> bool:
    """True when ``function`` was marked with :func:`gpu_task`."""
    return bool(getattr(function, _MARK, False))


@contextlib.contextmanager
def gpu_tasks(fraction: float | None = None) -> Iterator[None]:
    """Tasks built inside this context are GPU tasks (a ``dask.annotate`` context)."""
    with dask.annotate(resources=task_resources(True, fraction)):
        yield


class ResourceAnnotator:
    """Submit work to a client with GPU/CPU resource requests applied.

    With ``enabled=False`` nothing is annotated, and any task runs on any worker.
    """

    def __init__(self, client: Client, enabled: bool | None = None, fraction: float | None = None):
        self.client = client
        self.enabled = config.get("annotator.enabled") if enabled is None else bool(enabled)
        self.fraction = gpu_fraction(fraction)

    def resources_for(self, function: Any, gpu: bool | None = None) -> dict[str, float] | None:
        """Resources for one task of ``function``; ``gpu`` overrides the decorator."""
        if not self.enabled:
            return None
        explicit = dask.get_annotations().get("resources")
        if explicit is not None and gpu is None:
            return explicit
        return task_resources(is_gpu_task(function) if gpu is None else gpu, self.fraction)

    def submit(self, function: Callable, *args: Any, gpu_task: bool | None = None, **kwargs: Any):
        """``client.submit`` with resources; ``gpu_task=True`` marks this call a GPU task."""
        resources = self.resources_for(function, gpu_task)
        if resources is not None:
            kwargs["resources"] = resources
        return Client.submit(self.client, function, *args, **kwargs)

    def map(self, function: Callable, *iterables: Any, gpu_task: bool | None = None, **kwargs):
        """``client.map`` with resources; ``gpu_task=True`` marks every call a GPU task."""
        resources = self.resources_for(function, gpu_task)
        if resources is not None:
            kwargs["resources"] = resources
        return Client.map(self.client, function, *iterables, **kwargs)

    def annotate_collection(self, collection: Any) -> Any:
        """A copy of a ``Delayed`` whose tasks carry GPU/notGPU resources.

        Other collections (arrays, dataframes) are returned as they are: mark their GPU
        parts with :func:`gpu_tasks` when building them.

        Tasks of :func:`gpu_task` functions ask for a GPU share; tasks that already carry a
        ``resources`` annotation (from :func:`gpu_tasks` or ``dask.annotate``) keep it; every
        other task asks for ``notGPU``.
        """
        if not self.enabled or not isinstance(collection, Delayed):
            return collection
        graph = collection.__dask_graph__()
        if not isinstance(graph, HighLevelGraph):
            graph = HighLevelGraph.from_collections("hybrid-graph", dict(graph), [])
        explicit: dict[Any, Any] = {}
        for layer in graph.layers.values():
            resources = (layer.annotations or {}).get("resources")
            if resources is not None:
                for key in layer:
                    value = resources(key) if callable(resources) else resources
                    if isinstance(value, dict):
                        explicit[key] = value
        groups: dict[tuple, dict[Any, Any]] = {}
        for key, task in dict(graph).items():
            if key in explicit:
                resources = explicit[key]
            else:
                resources = task_resources(is_gpu_task(getattr(task, "func", None)), self.fraction)
            groups.setdefault(_freeze(resources), {})[key] = task
        # The group holding the output key takes the collection's layer name, which
        # Delayed requires to find itself in the new graph.
        output_layer = collection.__dask_layers__()[0]
        layers: dict[str, MaterializedLayer] = {}
        for i, (frozen, part) in enumerate(groups.items()):
            name = output_layer if collection.key in part else f"hybrid-resources-{i}"
            layers[name] = MaterializedLayer(part, annotations={"resources": dict(frozen)})
        new_graph = HighLevelGraph(layers, {name: set() for name in layers})
        return Delayed(collection.key, new_graph, length=getattr(collection, "_length", None))

    def compute(self, collections: Any, *args: Any, **kwargs: Any):
        """``client.compute`` of delayed collections with resources applied."""
        if isinstance(collections, (list, tuple)):
            collections = type(collections)(self.annotate_collection(c) for c in collections)
        else:
            collections = self.annotate_collection(collections)
        return Client.compute(self.client, collections, *args, **kwargs)

    def persist(self, collections: Any, *args: Any, **kwargs: Any):
        """``client.persist`` of delayed collections with resources applied."""
        if isinstance(collections, (list, tuple)):
            collections = type(collections)(self.annotate_collection(c) for c in collections)
        else:
            collections = self.annotate_collection(collections)
        return Client.persist(self.client, collections, *args, **kwargs)


def _freeze(resources: dict[str, float]) -> tuple:
    return tuple(sorted(resources.items()))


class HybridClient(Client):
    """A ``distributed.Client`` whose ``submit``, ``map``, ``compute`` and ``persist`` annotate.

    ``annotate_resources=False`` makes it a plain client. Given a ``tls://`` address and no
    ``security``, it connects with the credentials this user stored for that cluster
    (:func:`hybrid.security.find_credentials`), when there are any.
    """

    def __init__(
        self,
        *args: Any,
        annotate_resources: bool | None = None,
        gpu_fraction: float | None = None,
        **kwargs: Any,
    ):
        self.annotator = ResourceAnnotator(self, annotate_resources, gpu_fraction)
        address = args[0] if args else kwargs.get("address")
        if isinstance(address, str) and address.startswith("tls://") and kwargs.get(
                "security") is None:
            from hybrid.security import load_security

            kwargs["security"] = load_security({"address": address})
        super().__init__(*args, **kwargs)

    def submit(self, func, *args, gpu_task: bool | None = None, **kwargs) -> Future:  # type: ignore[override]
        """``Client.submit``; ``gpu_task=True`` marks this call a GPU task."""
        if "resources" in kwargs:
            return super().submit(func, *args, **kwargs)
        return self.annotator.submit(func, *args, gpu_task=gpu_task, **kwargs)

    def map(self, func, *iterables, gpu_task: bool | None = None, **kwargs):  # type: ignore[override]
        """``Client.map``; ``gpu_task=True`` marks every call a GPU task."""
        if "resources" in kwargs:
            return super().map(func, *iterables, **kwargs)
        return self.annotator.map(func, *iterables, gpu_task=gpu_task, **kwargs)

    def compute(self, collections, *args, **kwargs):  # type: ignore[override]
        """``Client.compute`` with GPU/notGPU resources on every task."""
        if kwargs.get("resources") is None and self.annotator.enabled:
            return self.annotator.compute(collections, *args, **kwargs)
        return super().compute(collections, *args, **kwargs)

    def persist(self, collections, *args, **kwargs):  # type: ignore[override]
        """``Client.persist`` with GPU/notGPU resources on every task."""
        if kwargs.get("resources") is None and self.annotator.enabled:
            return self.annotator.persist(collections, *args, **kwargs)
        return super().persist(collections, *args, **kwargs)
