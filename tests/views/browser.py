"""REAL headless Chromium (Debian's ``chromium`` package) driven by Playwright.

Playwright's own browser downloads are not used: it drives ``/usr/bin/chromium`` (installed by
``ci/test.sh``) with the flags a closed network needs and a fresh profile per test.
Screenshots are test artefacts, written under :data:`ARTIFACTS` (``HYBRID_TEST_ARTIFACTS``);
no test reads them back.

A cluster's dashboard is HTTPS with the cluster's own certificate (``hybrid.security``:
distributed's temporary certificate, which is its own CA and is issued to ``dask-internal``,
not to ``127.0.0.1``). :func:`chromium` takes that CA (``trust``): Chromium then accepts
exactly the certificates whose public key is the CA's (``--ignore-certificate-errors-spki-list``,
a pin: any other certificate still fails, and ``ignore_https_errors`` is not used), and
:func:`assert_served_with` checks the chain and the name with Python's ``ssl`` against that
CA, as a client of the cluster does.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import os
import shutil
import socket
import ssl
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

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


def spki_pins(pem: str) -> list[str]:
    """Chromium's pins (base64 of the SHA-256 of the SubjectPublicKeyInfo) of the
    certificates in ``pem``."""
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization

    pins = []
    for cert in x509.load_pem_x509_certificates(pem.encode()):
        spki = cert.public_key().public_bytes(serialization.Encoding.DER,
                                              serialization.PublicFormat.SubjectPublicKeyInfo)
        pins.append(base64.b64encode(hashlib.sha256(spki).digest()).decode())
    return pins


def assert_served_with(url: str, ca_pem: str, name: str = "dask-internal") -> None:
    """The HTTPS server of ``url`` presents a certificate chain that ``ca_pem`` signed,
    issued to ``name`` (what the cluster's own clients check)."""
    parts = urlsplit(url)
    context = ssl.create_default_context(cadata=ca_pem)  # verifies chain and name
    with socket.create_connection((parts.hostname, parts.port), timeout=10) as raw, \
            context.wrap_socket(raw, server_hostname=name) as tls:
        assert tls.getpeercert(), f"{url}: no certificate"


@contextlib.contextmanager
def chromium(profile: Path, width: int = 1280, height: int = 900,
             trust: str | None = None) -> Iterator[Any]:
    """A browser context of a fresh headless Chromium (profile directory ``profile``);
    ``trust``: a cluster's CA (PEM), whose key Chromium accepts for HTTPS (and no other)."""
    from playwright.sync_api import sync_playwright

    problem = chromium_missing()
    assert problem is None, problem
    args = list(FLAGS)
    if trust is not None:
        args.append("--ignore-certificate-errors-spki-list=" + ",".join(spki_pins(trust)))
    with sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            str(profile), executable_path=CHROMIUM, headless=True, args=args,
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
