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

    def recorded_work(x: int, seconds: float) -> int:
        """A plain task that takes ``seconds`` and reports each run of itself to the
        scheduler (event topic ``hybrid-runs``): a task run twice was recomputed."""
        import time

        from distributed import get_worker

        worker = get_worker()
        worker.log_event("hybrid-runs", {"key": str(worker.get_current_task()),
                                         "worker": str(worker.name)})
        time.sleep(seconds)
        return x

    def held_until(name: str, x: int) -> int:
        """A plain task that runs until the distributed Event ``name`` is set; it reports
        its start (event topic ``hybrid-held``: ``x``)."""
        from distributed import Event, get_worker

        get_worker().log_event("hybrid-held", {"x": x})
        Event(name).wait(timeout=600)
        return x

    def fill_scratch(name: str, seconds: float) -> list[str]:
        """A task that writes a file ``name`` into its worker's local directory and into
        the temporary directory (where a task's own temporary files go), then holds for
        ``seconds``: the two files' paths, reported as the event ``hybrid-scratch``."""
        import os
        import tempfile
        import time

        from distributed import get_worker

        worker = get_worker()
        paths = [os.path.join(worker.local_directory, name),
                 os.path.join(tempfile.gettempdir(), name)]
        for path in paths:
            with open(path, "w") as out:
                out.write("scratch")
        worker.log_event("hybrid-scratch", paths)
        time.sleep(seconds)
        return paths

    return (gpu_task(simulate), pack, gpu_task(slow_simulation), square, environment_value,
            hog, recorded_work, held_until, fill_scratch)


(simulate, pack, slow_simulation, square, environment_value, hog, recorded_work,
 held_until, fill_scratch) = _build()


def started_held(client) -> set[int]:
    """The ``x`` of every :func:`held_until` task that has started."""
    return {message["x"] for _, message in client.get_events("hybrid-held")}


def runs_per_key(client) -> dict[str, int]:
    """How many times each task recorded by :func:`recorded_work` ran."""
    counts: dict[str, int] = {}
    for _, message in client.get_events("hybrid-runs"):
        counts[message["key"]] = counts.get(message["key"], 0) + 1
    return counts
