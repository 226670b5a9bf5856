"""The REAL CI pools' daemons listen on loopback alone (tests keep every server there)."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest


def _listening(pid: int) -> set[str]:
    import psutil

    process = psutil.Process(pid)
    sockets = getattr(process, "net_connections", None) or process.connections
    return {c.laddr.ip for c in sockets(kind="inet") if c.status == psutil.CONN_LISTEN}


@pytest.mark.slurm
def test_the_ci_slurm_daemons_listen_on_loopback_only(slurm_cluster: Path) -> None:
    """ci/slurm/up.sh binds slurmctld and slurmd to this host's name, which resolves to
    127.0.0.1 here (where it does not, the configuration says why they cannot)."""
    node = socket.gethostname().split(".")[0]
    loopback = socket.getaddrinfo(node, None, socket.AF_INET)[0][4][0] == "127.0.0.1"
    conf = Path("/etc/slurm/slurm.conf").read_text()
    if not loopback:
        assert f"{node} does not resolve to 127.0.0.1" in conf
        return
    assert "CommunicationParameters=NoCtldInAddrAny,NoInAddrAny" in conf
    for daemon in ("slurmctld", "slurmd"):
        pid = int((slurm_cluster / "run" / f"{daemon}.pid").read_text())
        assert _listening(pid) == {"127.0.0.1"}, daemon
