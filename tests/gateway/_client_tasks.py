"""Task functions the batch workers of tests/gateway/test_client.py run.

They are built inside a function, so cloudpickle ships them BY VALUE (as it does a notebook's
functions): the workers (HTCondor jobs in a chroot, Slurm jobs) never import the test package.
(``distributed`` pickles a task graph with plain pickle unless the object's *own* module is
registered by value, so ``register_pickle_by_value`` on this module is not enough.)
"""

from __future__ import annotations


def _build():
    def square(x: int) -> int:
        """A plain task."""
        return x * x

    def square_and_worker(x: int) -> tuple[int, str]:
        """A result and the worker it ran on."""
        from distributed import get_worker

        return x * x, str(get_worker().name)

    def environment_value(name: str) -> str | None:
        """The worker process's value of an environment variable."""
        import os

        return os.environ.get(name)

    def dialed_scheduler_address(dask_worker) -> str:
        """For ``client.run``: the address this worker dialed to reach its scheduler."""
        return str(dask_worker.scheduler.address)

    return square, square_and_worker, environment_value, dialed_scheduler_address


square, square_and_worker, environment_value, dialed_scheduler_address = _build()
