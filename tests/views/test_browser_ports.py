"""Ports browsers refuse: hybrid never picks one for a page people open.

A system whose ephemeral ports start low (this machine's are 1024-65535) can hand out one of
the Fetch standard's blocked ports for a port 0: the dev gateway once came up on 6669, and the
REAL Chromium refused its pools page with ``ERR_UNSAFE_PORT``.
"""

from __future__ import annotations

import contextlib
import http.server
import itertools
import socket
import threading
from collections.abc import Iterator

import pytest

from hybrid.gateway_server import dev
from hybrid.security import BROWSER_BLOCKED_PORTS, browsable, browser_port, dashboard_listen
from tests.views.browser import chromium


def hand_out(monkeypatch, *ports: int) -> None:
    """A test double of distributed's ``open_port`` that hands out ``ports`` in turn."""
    import distributed.utils

    given = iter(ports)
    monkeypatch.setattr(distributed.utils, "open_port", lambda host="": next(given))


def test_a_free_port_browsers_refuse_is_skipped(monkeypatch) -> None:
    hand_out(monkeypatch, 6669, 10080, 6000, 45123)
    assert browser_port("127.0.0.1") == 45123


def test_a_dashboard_on_any_port_gets_one_browsers_open(monkeypatch) -> None:
    hand_out(monkeypatch, 6666, 45124, 6667, 45125)
    assert browsable("127.0.0.1:0") == "127.0.0.1:45124"
    assert browsable(":0") == ":45125"
    assert browsable("127.0.0.1:8787") == "127.0.0.1:8787"  # a port someone chose stays


def test_the_default_dashboard_address_is_a_port_browsers_open() -> None:
    listen, shown = dashboard_listen(True)
    host, port = listen.rsplit(":", 1)
    assert shown and host == "127.0.0.1"
    assert int(port) > 0 and int(port) not in BROWSER_BLOCKED_PORTS


def test_the_dev_gateways_page_port_is_one_browsers_open(monkeypatch) -> None:
    hand_out(monkeypatch, 6669, 45126)
    others = itertools.count(45200)
    monkeypatch.setattr(dev, "open_port", lambda host="": next(others))
    api_port, port, proxy_port = dev._free_ports(0, 0)
    assert port == 45126 and len({api_port, port, proxy_port}) == 3


@contextlib.contextmanager
def serving(port: int) -> Iterator[str]:
    """A plain HTTP server on 127.0.0.1:``port``; its URL."""

    class Page(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = b"<title>served</title>ok"
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", port), Page)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


def _free_blocked_port() -> int:
    """A blocked port above 1023 that nothing here listens on."""
    for port in sorted(p for p in BROWSER_BLOCKED_PORTS if p > 1023):
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise AssertionError("every blocked port above 1023 is taken here")


@pytest.mark.browser
@pytest.mark.timeout(120)
def test_the_real_chromium_refuses_a_blocked_port_and_opens_the_one_chosen(tmp_path) -> None:
    """The list is the one the browser applies: a page on a blocked port is refused, a page
    on :func:`browser_port`'s port opens."""
    with chromium(tmp_path / "profile") as browser, \
            serving(_free_blocked_port()) as refused, serving(browser_port("127.0.0.1")) as ok:
        with pytest.raises(Exception, match="ERR_UNSAFE_PORT"):
            browser.new_page().goto(refused)
        page = browser.new_page()  # (the first one goes on to its error page)
        page.goto(ok)
        assert page.title() == "served"
