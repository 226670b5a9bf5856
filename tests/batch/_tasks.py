"""Task functions batch workers run. They are built inside a function, so cloudpickle ships
them BY VALUE (as it does a notebook's functions): workers never import the test package.

(Registering this module with ``cloudpickle.register_pickle_by_value`` instead made the
HTCondor workers in the CI chroot exit on the first such task; closures work everywhere.)
"""

from __future__ import annotations

from hybrid.annotator import gpu_task


def _build():
    def simulate(seed: int) -> tuple[int, str]:
        """A GPU task: a result and the worker it ran on."""
        import time

        from distributed import get_worker

        time.sleep(0.05)
        return seed * 3, get_worker().name

    def pack(seed: int) -> tuple[int, str]:
        """A CPU task: a result and the worker it ran on."""
        from distributed import get_worker

        return seed + 1000, get_worker().name

    def slow_simulation(seed: int) -> int:
        """A GPU task that takes a second."""
        import time

        time.sleep(1.0)
        return seed

    def square(x: int) -> int:
        """A plain task."""
        return x * x

    def environment_value(name: str) -> str | None:
        """The worker process's value of an environment variable."""
        import os

        return os.environ.get(name)

    def hog(mebibytes: int) -> int:
        """A task that holds this many MiB resident for a minute (past a small worker's
        memory limit)."""
        import time

        block = bytearray(mebibytes * 2**20)
        for i in range(0, len(block), 4096):
            block[i] = 1  # touched: resident, not just reserved
        time.sleep(60)
        return len(block)

    return (gpu_task(simulate), pack, gpu_task(slow_simulation), square, environment_value,
            hog)


simulate, pack, slow_simulation, square, environment_value, hog = _build()
