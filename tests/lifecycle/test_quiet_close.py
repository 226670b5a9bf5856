"""A closing cluster says nothing about the workers that leave with it (the CI failure of
stop 29: ``TLS handshake failed ... Connection reset by peer`` from the scheduler's listener
while SIGTERM closed a cluster, a worker killed half-way through opening a connection).

A REAL TLS scheduler of a :class:`~hybrid.HybridCluster`; the departing peer is a TCP
connection that resets in the middle of the TLS handshake, as a killed worker's does.
"""

from __future__ import annotations

import logging
import socket
import struct

import dask
import psutil
import pytest

from hybrid import HybridCluster
from tests.gateway.helpers import wait_for

pytestmark = pytest.mark.timeout(120)


def _handshakes(caplog: pytest.LogCaptureFixture) -> list[str]:
    """The listener's handshake warnings captured so far (a filter on the logger that
    writes them drops a record before any handler, caplog's too, sees it)."""
    return [r.getMessage() for r in caplog.records if "handshake failed" in r.getMessage()]


def _reset_mid_handshake(address: str) -> None:
    """Connect to the TLS listener, send nothing, reset (RST) the connection; return once the
    listener has dropped its side."""
    host, port = address.removeprefix("tls://").rsplit(":", 1)
    peer = socket.create_connection((host, int(port)), timeout=10)
    local_port = peer.getsockname()[1]
    peer.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))

    def server_side_open() -> bool:
        return any(c.raddr and c.raddr.port == local_port and c.laddr.port == int(port)
                   for c in psutil.Process().net_connections("tcp"))

    wait_for(server_side_open, 30, message="the listener accepted the connection")
    peer.close()  # SO_LINGER 0: RST
    wait_for(lambda: not server_side_open(), 30, message="the listener dropped the peer")


def test_a_peer_reset_mid_handshake_is_said_while_open_and_not_while_closing(monkeypatch,
                                                                           caplog):
    caplog.set_level(logging.WARNING, logger="distributed.comm.tcp")
    with dask.config.set({"hybrid.scheduler.host": "127.0.0.1"}):
        cluster = HybridCluster()
    address = cluster.scheduler_address
    assert address.startswith("tls://127.0.0.1:")

    # open: a peer that resets mid-handshake is worth a warning (nothing is hidden)
    _reset_mid_handshake(address)
    wait_for(lambda: _handshakes(caplog), 30, message="the listener's warning")
    seen = len(_handshakes(caplog))

    # closing: the same from a departing worker is not
    stop = cluster.manager.stop
    departed: list[bool] = []

    async def stop_then_a_worker_departs() -> None:
        await stop()
        if not departed:  # (the first stop: the scheduler still listens)
            departed.append(True)
            await cluster.loop.run_in_executor(None, _reset_mid_handshake, address)

    monkeypatch.setattr(cluster.manager, "stop", stop_then_a_worker_departs)
    cluster.close()
    assert departed
    assert len(_handshakes(caplog)) == seen, _handshakes(caplog)

    # and after the close, the listener's logger is as it was
    assert not logging.getLogger("distributed.comm.tcp").filters


def test_a_handler_the_caller_shares_with_the_root_logger_keeps_its_level() -> None:
    """A cluster quiets the StreamHandlers that distributed gave its own ``distributed`` and
    ``bokeh`` loggers, not a handler the caller attached to the root logger as well (pytest
    9 attaches its caplog handler to every non-propagating logger, ``bokeh`` included): it
    lost hybrid's INFO lines for the cluster's whole life, and a test that read them
    failed or passed with the order the test files ran in."""
    from io import StringIO

    root, bokeh = logging.getLogger(), logging.getLogger("bokeh")
    shared = logging.StreamHandler(StringIO())
    shared.setLevel(logging.INFO)
    hybrid_logger = logging.getLogger("hybrid.test-quiet")
    old_level = hybrid_logger.level
    root.addHandler(shared)
    bokeh.addHandler(shared)
    try:
        hybrid_logger.setLevel(logging.INFO)
        with HybridCluster():
            assert shared.level == logging.INFO
            hybrid_logger.info("heard while the cluster runs")
        assert shared.level == logging.INFO
        assert "heard while the cluster runs" in shared.stream.getvalue()
    finally:
        root.removeHandler(shared)
        bokeh.removeHandler(shared)
        hybrid_logger.setLevel(old_level)


def test_an_unknown_log_level_is_refused_by_name_before_anything_starts() -> None:
    from hybrid.errors import ConfigurationError

    with pytest.raises(ConfigurationError, match=r"silence_logs = 'bogus'.*'warning'"):
        HybridCluster(silence_logs="bogus")


def test_a_cluster_says_it_closes_while_its_own_scheduler_still_listens(caplog) -> None:
    """A cluster that runs its own scheduler tells the scheduler that it closes before it
    stops it, not after: the word sent to a scheduler already stopped waited out its whole
    bound (2 s) on every close of every cluster, the P7 close of 0.23 s became 2.05 s
    (benchmarks/results/2026-11-28-f1-tls.json)."""
    from distributed.diagnostics.plugin import SchedulerPlugin

    from hybrid.scheduler_probe import CLOSING_KEY

    class SeenAtClose(SchedulerPlugin):
        name = "hybrid-test-seen-at-close"

        def __init__(self, scheduler) -> None:
            self.scheduler = scheduler
            self.closing: list[object] = []

        async def close(self) -> None:
            self.closing.append(self.scheduler.get_metadata([CLOSING_KEY], default=False))

    caplog.set_level(logging.DEBUG, logger="hybrid.manager")
    with dask.config.set({"hybrid.scheduler.host": "127.0.0.1"}):
        with HybridCluster() as cluster:
            cluster.add_pool("cpu", "local", nanny=False)
            cluster.scale(1, wait=True, timeout=60)
            plugin = SeenAtClose(cluster.scheduler)
            cluster.scheduler.add_plugin(plugin)
    assert plugin.closing == [True]
    assert not [r.getMessage() for r in caplog.records
                if "cannot mark it closing" in r.getMessage()]
