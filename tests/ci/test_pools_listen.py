"""The REAL CI pools' daemons listen on loopback alone (tests keep every server there)."""

from __future__ import annotations

import os
import socket
import subprocess
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


@pytest.mark.sge
def test_the_ci_grid_engine_daemons_listen_on_loopback_only(sge_cell: Path) -> None:
    """Grid Engine has no setting for the address it listens on: ci/sge/up.sh starts its
    daemons with a bind shim (ci/sge/loopback_bind.c) that puts them on 127.0.0.1, and the
    jobs they start do not carry the shim."""
    for daemon in ("qmaster", "execd"):
        pid = int((sge_cell / "run" / f"{daemon}.pid").read_text().split()[0])
        listening = _listening(pid)
        assert listening and listening <= {"127.0.0.1", "::1"}, (daemon, listening)
    job = subprocess.run(["qsub", "-sync", "y", "-S", "/bin/sh", "-j", "y", "-o", "/dev/null",
                          "-q", os.environ["HYBRID_CI_SGE_QUEUE"]],
                         input='test -z "${LD_PRELOAD-}"\n', capture_output=True, text=True,
                         timeout=120)
    assert job.returncode == 0, job.stdout + job.stderr  # (qsub -sync y: the job's exit code)
