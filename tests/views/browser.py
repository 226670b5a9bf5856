"""REAL headless Chromium (Debian's ``chromium`` package) driven by Playwright.

Playwright's own browser downloads are not used: it drives ``/usr/bin/chromium`` (installed by
``ci/test.sh``) with the flags a closed network needs and a fresh profile per test.
Screenshots are test artefacts, written under :data:`ARTIFACTS` (``HYBRID_TEST_ARTIFACTS``);
no test reads them back.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
CHROMIUM = os.environ.get("HYBRID_CHROMIUM", "/usr/bin/chromium")
#: Launch flags for a machine without outside network (see docs/ci-pools.md).
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]
ARTIFACTS = Path(os.environ.get("HYBRID_TEST_ARTIFACTS", REPO / "test-artifacts")) / "screenshots"


def chromium_missing() -> str | None:
    """Why the browser tests cannot run here (``None``: they can)."""
    if shutil.which(CHROMIUM) is None:
        return f"{CHROMIUM} is missing: `apt-get install chromium` (ci/test.sh does)"
    try:
        import playwright  # noqa: F401
    except ImportError:
        return "playwright is missing: pip install -e '.[test]'"
    return None


@contextlib.contextmanager
def chromium(profile: Path, width: int = 1280, height: int = 900) -> Iterator[Any]:
    """A browser context of a fresh headless Chromium (profile directory ``profile``)."""
    from playwright.sync_api import sync_playwright

    problem = chromium_missing()
    assert problem is None, problem
    with sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            str(profile), executable_path=CHROMIUM, headless=True, args=FLAGS,
            viewport={"width": width, "height": height})
        try:
            yield context
        finally:
            context.close()


def screenshot(page: Any, name: str) -> Path:
    """Save a full-page screenshot as a test artefact; its path."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    assert path.stat().st_size > 1000, f"{path} is empty"
    return path
