"""The CI bring-up scripts' own logic, without starting anything (no root needed)."""

from __future__ import annotations

import os
import subprocess
import uuid
from pathlib import Path

import pytest

COMMON = Path(__file__).resolve().parents[2] / "ci" / "htcondor" / "common.sh"


def mirror(apt: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    script = f'source "{COMMON}"; debian_mirror'
    return subprocess.run(["bash", "-c", script], capture_output=True, text=True,
                          env={"PATH": "/usr/bin:/bin", "HYBRID_CI_APT_DIR": str(apt),
                               **(env or {})})


@pytest.mark.parametrize("name, text, expected", [
    ("debian.sources", "Types: deb\nURIs: http://mirror.example.org/debian\n"
                       "Suites: bookworm\n", "http://mirror.example.org/debian"),
    ("mirror.list", "# deb http://commented.example/debian x main\n"
                    "deb http://ftp.example.net/debian/ bookworm main\n",
     "http://ftp.example.net/debian/"),
])
def test_the_mirror_comes_from_the_hosts_apt_sources(tmp_path, name, text, expected) -> None:
    (tmp_path / "sources.list.d").mkdir()
    (tmp_path / "sources.list.d" / name).write_text(text)
    result = mirror(tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == expected


def test_no_mirror_in_the_sources_is_a_clear_error_not_a_guessed_address(tmp_path) -> None:
    (tmp_path / "sources.list.d").mkdir()
    (tmp_path / "sources.list.d" / "security.sources").write_text(
        "URIs: http://deb.debian.org/debian-security\n")
    result = mirror(tmp_path)
    assert result.returncode != 0
    assert result.stdout == ""  # no address at all, and certainly not deb.debian.org
    assert "HYBRID_CI_DEBIAN_MIRROR" in result.stderr and "no Debian mirror" in result.stderr


def test_an_explicit_mirror_wins(tmp_path) -> None:
    result = mirror(tmp_path, {"HYBRID_CI_DEBIAN_MIRROR": "http://local.example/debian"})
    assert result.returncode == 0 and result.stdout.strip() == "http://local.example/debian"


SWEEP = Path(__file__).resolve().parents[2] / "ci" / "slurm" / "sweep-jobs.sh"


def _started_with_cluster(name: str, *argv: str) -> subprocess.Popen:
    """A process in a session of its own carrying ``SLURM_CLUSTER_NAME=name``, as slurmstepd
    gives a job's processes."""
    return subprocess.Popen(list(argv), env={**os.environ, "SLURM_CLUSTER_NAME": name},
                            start_new_session=True)


@pytest.mark.parametrize("program, ignores_term", [
    (["sleep", "600"], False),
    (["bash", "-c", "trap '' TERM; sleep 600 & wait; sleep 600"], True),
    # its child (which ignores TERM too) starts while the sweep stops the parent: CI's
    # busy machine once ran the sweep before bash had started the child above
    (["bash", "-c", "trap '' TERM; sleep 1; sleep 600 & wait; sleep 600"], True),
], ids=["leaves at TERM", "needs KILL", "a child started while stopping"])
def test_the_slurm_sweep_stops_exactly_the_named_clusters_job_processes(
        program: list[str], ignores_term: bool) -> None:
    """ci/slurm/down.sh's sweep (what scancel missed: a job's process reparented to init)
    stops the processes of the named cluster's jobs, and no other, those that start while
    it stops the others included."""
    name = f"sweeptest{uuid.uuid4().hex[:8]}"
    ours = _started_with_cluster(name, *program)
    another = _started_with_cluster(name + "x", "sleep", "600")
    try:
        result = subprocess.run(["bash", str(SWEEP), name], capture_output=True, text=True,
                                timeout=60)
        assert result.returncode == 0, result.stderr
        assert f"  {ours.pid}: " in result.stdout and str(another.pid) not in result.stdout
        ours.wait(timeout=30)  # (it was stopped: only the zombie was left for us to reap)
        assert ("SIGKILL" in result.stdout) is ignores_term
        assert another.poll() is None
        again = subprocess.run(["bash", str(SWEEP), name], capture_output=True, text=True,
                               timeout=60)
        assert again.returncode == 0 and again.stdout == ""  # nothing left: says nothing
    finally:
        for process in (ours, another):
            if process.poll() is None:
                process.kill()
            process.wait()
