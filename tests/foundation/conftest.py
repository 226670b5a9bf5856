"""Helpers of the foundation tests: clean subprocesses and the venv's console scripts.

Subprocesses get this environment minus every ``DASK_*`` variable (so a developer's own
settings cannot change a result), plus what the test adds.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest

#: The repository root: subprocesses run here so that ``tests.*`` and ``hybrid`` import.
REPO_ROOT = Path(__file__).resolve().parents[2]


def clean_environment(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """This process's environment without ``DASK_*`` variables, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DASK_")}
    env.update(extra or {})
    return env


def venv_script(name: str) -> str:
    """Path of a console script installed beside this interpreter (``hybrid``, ``dask``)."""
    path = Path(sys.executable).parent / name
    assert path.exists(), f"{path} is not installed: `pip install -e .` the project first"
    return str(path)


def run_command(argv: list[str], env: Mapping[str, str] | None = None,
                timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` in the repository root with a clean environment; capture its output."""
    return subprocess.run(argv, cwd=REPO_ROOT, env=clean_environment(env), capture_output=True,
                          text=True, timeout=timeout, check=False)


@pytest.fixture
def run_python() -> Callable[..., Any]:
    """``run_python(code, env=None)``: run ``python -c code`` and return its JSON stdout.

    ``code`` must print one JSON document as its last line of output.
    """

    def run(code: str, env: Mapping[str, str] | None = None) -> Any:
        result = run_command([sys.executable, "-c", code], env=env, timeout=60)
        assert result.returncode == 0, f"python -c failed:\n{result.stdout}\n{result.stderr}"
        return json.loads(result.stdout.strip().splitlines()[-1])

    return run
