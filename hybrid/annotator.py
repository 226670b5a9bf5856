"""The resource annotator: GPU tasks go to GPU workers, every other task to CPU workers.

A task is a GPU task only by explicit metadata: the :func:`gpu_task` decorator on its
function, the ``gpu_task=True`` keyword of :meth:`ResourceAnnotator.submit`, or the
:func:`gpu_tasks` context (a ``dask.annotate``). Task contents are never inspected.

GPU tasks ask for ``{"GPU": fraction}`` (``hybrid.annotator.gpu-fraction``, 0.5); every other
task asks for ``{"notGPU": 1}``. GPU workers advertise ``GPU=<gpus> notGPU=0`` (a pool's: their
GPU task slots) and CPU workers ``GPU=0 notGPU=<threads>`` (:func:`worker_resources`), so
neither kind of task can land on the other kind of worker. ``compute`` and ``persist`` also
give GPU tasks and the tasks they wait for a higher priority (``hybrid.annotator.feed-priority``),
so that CPU workers prepare the GPUs' inputs first.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import dask
from dask.delayed import Delayed
from dask.highlevelgraph import HighLevelGraph, MaterializedLayer
from dask.typing import no_default
from distributed import Client, Future

from hybrid import config
from hybrid.errors import ConfigurationError
from hybrid.fields import boolean
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

    def __init__(self, client: Client, enabled: bool | None = None, fraction: float | None = None,
                 field: str = "ResourceAnnotator.enabled"):
        self.client = client
        enabled = boolean(enabled, field, "hybrid.annotator.enabled")  # ("false" is true)
        self.enabled = config.get("annotator.enabled") if enabled is None else enabled
        self.fraction = gpu_fraction(fraction)

    def resources_for(self, function: Any, gpu: bool | None = None) -> dict[str, float] | None:
        """Resources for one task of ``function``; ``gpu`` (the ``gpu_task`` keyword: True,
        False or None) overrides the decorator."""
        gpu = boolean(gpu, "gpu_task", "the function's @gpu_task decides")
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

    def annotate_collection(self, collection: Any, priority: int = 0) -> Any:
        """A copy of a ``Delayed`` whose tasks carry GPU/notGPU resources and priorities.

        Other collections (arrays, dataframes) are returned as they are: mark their GPU
        parts with :func:`gpu_tasks` when building them.

        Tasks of :func:`gpu_task` functions ask for a GPU share; tasks that already carry a
        ``resources`` annotation (from :func:`gpu_tasks` or ``dask.annotate``) keep it; every
        other task asks for ``notGPU``. GPU tasks, and every task whose result a GPU task
        waits for, get ``priority + hybrid.annotator.feed-priority`` (distributed runs higher
        priorities first), so CPU workers prepare the GPUs' inputs before other CPU work;
        a task's own ``priority`` annotation is kept, and so are its other annotations.
        """
        return self.annotate_collections([collection], priority)[0]

    def annotate_collections(self, collections: list[Any], priority: int = 0) -> list[Any]:
        """:meth:`annotate_collection` of several collections computed together: a task
        they share gets the same annotations in each (its priority from all of them)."""
        delayed = [c for c in collections if self.enabled and isinstance(c, Delayed)]
        if not delayed:
            return list(collections)
        graphs = []
        for collection in delayed:
            graph = collection.__dask_graph__()
            if not isinstance(graph, HighLevelGraph):
                graph = HighLevelGraph.from_collections("hybrid-graph", dict(graph), [])
            graphs.append(graph)
        annotations = self._annotations(graphs, priority)
        rebuilt = {id(c): _rebuild(c, g, annotations)
                   for c, g in zip(delayed, graphs, strict=True)}
        return [rebuilt.get(id(c), c) for c in collections]

    def _annotations(self, graphs: list[HighLevelGraph], priority: int) -> dict[Any, dict]:
        """Every task's annotations (see :meth:`annotate_collection`)."""
        given: dict[Any, dict[str, Any]] = {}
        tasks: dict[Any, Any] = {}
        for graph in graphs:
            for layer in graph.layers.values():
                for name, value in (layer.annotations or {}).items():
                    for key in layer:
                        given.setdefault(key, {})[name] = (value(key) if callable(value)
                                                           else value)
            tasks.update(dict(graph))
        annotations: dict[Any, dict[str, Any]] = {}
        gpu_keys = []
        for key, task in tasks.items():
            mine = dict(given.get(key, {}))
            if not isinstance(mine.get("resources"), dict):
                gpu = is_gpu_task(getattr(task, "func", None))
                mine["resources"] = task_resources(gpu, self.fraction)
            if GPU in mine["resources"]:
                gpu_keys.append(key)
            annotations[key] = mine
        bump = feed_priority()
        if bump and gpu_keys:
            for key in _ancestors(tasks, gpu_keys):
                annotations[key].setdefault("priority", priority + bump)
        return annotations

    def _annotated(self, collections: Any, priority: Any) -> Any:
        base = priority if isinstance(priority, int) and not isinstance(priority, bool) else 0
        if isinstance(collections, (list, tuple)):
            return type(collections)(self.annotate_collections(list(collections), base))
        return self.annotate_collection(collections, base)

    def compute(self, collections: Any, *args: Any, **kwargs: Any):
        """``client.compute`` of delayed collections with resources and priorities applied."""
        collections = self._annotated(collections, kwargs.get("priority", 0))
        return Client.compute(self.client, collections, *args, **kwargs)

    def persist(self, collections: Any, *args: Any, **kwargs: Any):
        """``client.persist`` of delayed collections with resources and priorities applied."""
        collections = self._annotated(collections, kwargs.get("priority", 0))
        return Client.persist(self.client, collections, *args, **kwargs)


def _rebuild(collection: Delayed, graph: HighLevelGraph,
             annotations: dict[Any, dict[str, Any]]) -> Delayed:
    """``collection`` as ONE layer of all its tasks, annotated key by key.

    One layer, because layers of a high-level graph must declare what they depend on, and
    tasks grouped by their annotations depend on each other both ways (a packing feeds a
    simulation that feeds the next packing). Each annotation is the ``get`` of a mapping from
    key to value (picklable without hybrid on the scheduler, which applies it); a key the
    mapping lacks gets nothing (distributed skips ``None``): the caller's ``priority=``,
    say.
    """
    tasks = dict(graph)
    by_type: dict[str, dict[Any, Any]] = {}
    for key in tasks:
        for name, value in annotations[key].items():
            by_type.setdefault(name, {})[key] = value
    layer = MaterializedLayer(tasks, annotations={name: values.get
                                                  for name, values in by_type.items()})
    # The layer takes the collection's name, which Delayed requires to find itself.
    name = collection.__dask_layers__()[0]
    return Delayed(collection.key, HighLevelGraph({name: layer}, {name: set()}),
                   length=getattr(collection, "_length", None))


def feed_priority() -> int:
    """``hybrid.annotator.feed-priority``, validated: how much higher GPU tasks and the tasks
    they wait for are prioritised (0: not at all)."""
    return config.get("annotator.feed-priority", 1)


def _ancestors(tasks: dict[Any, Any], keys: list[Any]) -> set[Any]:
    """``keys`` and every task they depend on, directly or not."""
    from dask.core import get_dependencies

    seen = set(keys)
    stack = list(keys)
    while stack:
        for dependency in get_dependencies(tasks, stack.pop()):
            if dependency not in seen and dependency in tasks:
                seen.add(dependency)
                stack.append(dependency)
    return seen


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
        self.annotator = ResourceAnnotator(self, annotate_resources, gpu_fraction,
                                           "HybridClient.annotate_resources")
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

    def restart_workers(self, workers: list[str], timeout: Any = no_default,
                        raise_for_error: bool = True) -> Any:
        """``Client.restart_workers``, also for workers without a nanny (hybrid's default).

        distributed's client refuses those; here the scheduler closes them, their jobs end,
        and their pools submit replacements (a pool keeps its target), so the call returns
        once as many workers are connected as before, with ``"removed"`` for each worker
        replaced this way (``"OK"`` for each restarted by its nanny). A pool that does not
        refill in ``timeout`` raises ``TimeoutError``, as distributed's call does.
        """
        return self.sync(self._restart_any_workers, workers=workers, timeout=timeout,
                         raise_for_error=raise_for_error)

    async def _restart_any_workers(self, workers: list[str], timeout: Any,
                                   raise_for_error: bool) -> dict[str, str]:
        from time import time

        from dask.utils import parse_timedelta

        info = (await self.scheduler.identity())["workers"]
        if all(meta["nanny"] for addr, meta in info.items()
               if addr in workers or meta["name"] in workers):
            return await self._restart_workers(workers, timeout, raise_for_error)
        seconds = parse_timedelta(self._timeout * 4 if timeout is no_default else timeout, "s")
        by_name = {meta["name"]: addr for addr, meta in info.items()}
        addresses = [by_name.get(w, w) for w in workers]
        out = await self.scheduler.restart_workers(
            workers=addresses, timeout=seconds,
            on_error="raise" if raise_for_error else "return",
            stimulus_id=f"client-restart-workers-{time()}")
        return {w: out.get(a, "removed") for w, a in zip(workers, addresses, strict=True)}
