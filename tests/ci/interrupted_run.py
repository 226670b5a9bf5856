"""Two tests that wait until they are interrupted, run by name by tests/ci/test_parts.py
through ci/parts.sh (pytest does not collect this file by itself): one in the rest (in a
pytest-xdist worker), one in the pools' part (``serial``: a lane's pytest). Each fixture
notes its start and, after a teardown that takes a while (a cluster closing), its end."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture
def noted(request: pytest.FixtureRequest) -> Iterator[None]:
    record = Path(os.environ["RECORD"])
    name = f"{request.node.name}-{os.getpid()}"
    (record / f"started-{name}").write_text("")
    yield
    time.sleep(float(os.environ.get("TEARDOWN_S", "1")))
    (record / f"torn-down-{name}").write_text("")


def _wait() -> None:
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        time.sleep(0.05)


def test_in_the_rest_waits_until_interrupted(noted: None) -> None:
    _wait()


@pytest.mark.serial
def test_in_a_lane_waits_until_interrupted(noted: None) -> None:
    _wait()
