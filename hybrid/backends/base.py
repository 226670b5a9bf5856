"""The shape every backend shares: a context manager that owns a cluster and a client."""

from __future__ import annotations

import abc
from collections.abc import Callable
from typing import Any

from distributed import Future

from hybrid import lifecycle
from hybrid.annotator import HybridClient
from hybrid.annotator import gpu_fraction as validated_gpu_fraction
from hybrid.errors import HybridError, cleanup_after


class BaseDaskBackend(abc.ABC):
    """Start a cluster on ``__enter__``/:meth:`start`, submit tasks, remove it all on exit.

    The arguments of openff-evaluator's ``CalculationBackend``: ``number_of_workers`` and
    ``resources_per_worker`` (each backend checks and uses them). ``annotate_resources``
    routes GPU tasks to GPU workers and the rest to CPU workers (see
    :mod:`hybrid.annotator`); ``None`` takes ``hybrid.annotator.enabled``.
    """

    def __init__(self, number_of_workers: int = 1, resources_per_worker: Any = None, *,
                 annotate_resources: bool | None = None, gpu_fraction: float | None = None):
        if gpu_fraction is not None:
            validated_gpu_fraction(gpu_fraction, f"{type(self).__name__}.gpu_fraction")
        self.number_of_workers = number_of_workers
        self.resources_per_worker = resources_per_worker
        self.annotate_resources = annotate_resources
        self.gpu_fraction = gpu_fraction
        self._client: HybridClient | None = None
        self._cluster: Any = None
        self._ending: lifecycle.Ending | None = None

    @abc.abstractmethod
    def _start_cluster(self) -> Any:
        """Create and return the ``distributed`` cluster object (or an address)."""

    def start(self) -> None:
        """Start the cluster and connect a client. Undoes what it started if it fails."""
        if self._client is not None:
            return
        try:
            self._cluster = self._start_cluster()
            # how it ends, whatever ends the process (hybrid.lifecycle): registered after its
            # cluster, so that it ends first (its client before the scheduler goes)
            self._ending = lifecycle.register(type(self).__name__, self.stop)
            self._client = HybridClient(
                self._cluster,
                annotate_resources=self.annotate_resources,
                gpu_fraction=self.gpu_fraction,
                set_as_default=False,
            )
        except BaseException as error:
            cleanup_after(error, self.stop, "stopping the backend")
            raise

    def stop(self) -> None:
        """Close the client and the cluster; safe to call more than once."""
        ending, self._ending = self._ending, None
        problem: BaseException | None = None
        # a Ctrl-C while it closes does not cut it short
        with ending.closing() if ending else lifecycle.closing():
            try:
                self._stop()
            except BaseException as error:
                problem = error
                raise
            finally:
                if ending is not None:
                    ending.finished(problem)

    def _stop(self) -> None:
        client, self._client = self._client, None
        cluster, self._cluster = self._cluster, None
        if client is not None:
            client.close()
        if cluster is not None and hasattr(cluster, "close"):
            cluster.close()

    @property
    def started(self) -> bool:
        """Whether :meth:`start` connected a client (openff-evaluator's server asks)."""
        return self._client is not None

    @property
    def client(self) -> HybridClient:
        """The connected client (raises before :meth:`start`)."""
        if self._client is None:
            raise HybridError(f"{type(self).__name__} is not started: use it in a `with` block")
        return self._client

    @property
    def cluster(self) -> Any:
        """The underlying ``distributed`` cluster object."""
        return self._cluster

    def submit_task(
        self, function: Callable, *args: Any, gpu_task: bool | None = None, **kwargs: Any
    ) -> Future:
        """Submit ``function(*args, **kwargs)``; ``gpu_task=True`` marks it a GPU task."""
        kwargs.setdefault("pure", False)
        return self.client.submit(function, *args, gpu_task=gpu_task, **kwargs)

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, exc_type: Any, exc: BaseException | None, traceback: Any) -> None:
        cleanup_after(exc, self.stop, "stopping the backend")


#: openff-evaluator's name for the base of every backend.
CalculationBackend = BaseDaskBackend
