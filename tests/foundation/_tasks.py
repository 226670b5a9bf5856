"""Task functions the local workers run, pickled by value (workers never import the tests).

Call :func:`pickle_by_value` once in each test module that submits them.
"""

from __future__ import annotations

import os
import sys
import time

import cloudpickle
from distributed import get_worker

from hybrid.annotator import gpu_task

#: Names of the workers of the two-pool test cluster, in a fixed order.
WORKER_NAMES = ("cpu-0", "cpu-1", "gpu-0", "gpu-1")


def pickle_by_value() -> None:
    """Ship this module's functions by value, so workers skip importing the test package."""
    cloudpickle.register_pickle_by_value(sys.modules[__name__])


@gpu_task
def simulate(i: int, sleep: float = 0.0) -> str:
    """A GPU task: the name of the worker it ran on."""
    time.sleep(sleep)
    return get_worker().name


def pack(i: int, sleep: float = 0.0) -> str:
    """A CPU task (not decorated): the name of the worker it ran on."""
    time.sleep(sleep)
    return get_worker().name


def undecorated_gpu_work(i: int) -> str:
    """A GPU task only when submitted with ``gpu_task=True``."""
    return get_worker().name


@gpu_task
def gpu_window(i: int, sleep: float) -> tuple[float, float]:
    """A GPU task that reports when it started and when it ended."""
    start = time.time()
    time.sleep(sleep)
    return start, time.time()


def collect(*items: object) -> list:
    """The items as a list (a task that joins others)."""
    return list(items)


def block_worker(block):
    """An array block -> the same shape, filled with the index of the worker's name."""
    import numpy as np

    return np.full(block.shape, WORKER_NAMES.index(get_worker().name))


def worker_environment(name: str) -> str | None:
    """One environment variable of the worker process."""
    return os.environ.get(name)


def add(a: int, b: int) -> int:
    """A plain task with a known result."""
    return a + b
