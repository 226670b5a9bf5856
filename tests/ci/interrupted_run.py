"""A test that waits until it is interrupted, run by name by tests/ci/test_parts.py (pytest
does not collect this file by itself): its fixture notes its start and, after a teardown
that takes a while (a cluster closing), its end."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture
def noted() -> Iterator[None]:
    record = Path(os.environ["RECORD"])
    (record / f"started-{os.getpid()}").write_text("")
    yield
    time.sleep(float(os.environ.get("TEARDOWN_S", "1")))
    (record / f"torn-down-{os.getpid()}").write_text("")


def test_waits_until_interrupted(noted: None) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        time.sleep(0.05)
