"""The CI bring-up scripts' own logic, without starting anything (no root needed)."""

from __future__ import annotations

import subprocess
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
