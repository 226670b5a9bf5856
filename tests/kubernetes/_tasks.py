"""Task functions the worker pods run. Pickled by value: the pods do not have the tests."""

from __future__ import annotations

import os
from pathlib import Path


def worker_name() -> str:
    """The name of the worker running the task."""
    from distributed import get_worker

    return get_worker().name


def read_env_file(variable: str) -> str:
    """The contents of the file an environment variable points to."""
    return Path(os.environ[variable]).read_text()


def environment(variable: str) -> str | None:
    """One environment variable of the worker process."""
    return os.environ.get(variable)


def write_file(directory_variable: str, name: str, text: str) -> str:
    """Write ``text`` to a file in the directory an environment variable names; the worker."""
    (Path(os.environ[directory_variable]) / name).write_text(text)
    return worker_name()


def read_file(directory_variable: str, name: str) -> str:
    """The contents of a file in the directory an environment variable names."""
    return (Path(os.environ[directory_variable]) / name).read_text()


def slow_worker_name(seconds: float) -> str:
    """Sleep, then the worker's name: keeps a worker busy so its pool sees demand."""
    import time

    time.sleep(seconds)
    return worker_name()
