"""The command line: ``hybrid``, ``dask hybrid`` and ``hybrid demo`` (real local workers)."""

from __future__ import annotations

import json
import re

import pytest

from hybrid import __version__
from tests.foundation.conftest import run_command, venv_script


@pytest.mark.parametrize(
    "argv",
    [["hybrid", "--help"], ["hybrid", "-h"], ["hybrid", "demo", "--help"],
     ["dask", "hybrid", "--help"], ["dask", "hybrid", "demo", "--help"]],
    ids=" ".join,
)
def test_help_exits_zero(argv):
    result = run_command([venv_script(argv[0]), *argv[1:]], timeout=60)
    assert result.returncode == 0, result.stderr
    assert "Usage:" in result.stdout
    if "demo" in argv:
        for option in ("--gpu-workers", "--cpu-workers", "--simulations", "--packings", "--json"):
            assert option in result.stdout
    else:
        assert re.search(r"^\s+demo\s", result.stdout, re.MULTILINE), result.stdout


def test_version():
    result = run_command([venv_script("hybrid"), "--version"], timeout=60)
    assert result.returncode == 0
    assert result.stdout.strip() == f"hybrid, version {__version__}"


def test_demo_refuses_an_empty_pool_before_starting():
    result = run_command([venv_script("hybrid"), "demo", "--cpu-workers", "0"], timeout=60)
    assert result.returncode == 2
    assert "--cpu-workers" in result.stderr and "1<=x" in result.stderr
    assert "annotation" not in result.stdout


def test_demo_json_shows_routing_with_annotation_on():
    result = run_command([venv_script("hybrid"), "demo", "--json", "--simulations", "6",
                          "--packings", "6"], timeout=300)
    assert result.returncode == 0, result.stderr
    annotated, plain = json.loads(result.stdout)
    assert annotated["annotated"] is True
    assert plain["annotated"] is False
    for run in (annotated, plain):
        assert sum(run["workers"]["simulation"].values()) == 6
        assert sum(run["workers"]["packing"].values()) == 6
        assert run["wall_seconds"] > 0
        assert run["task_seconds"]["simulation"] > 0
        assert run["task_seconds"]["packing"] > 0
    assert all(name.startswith("gpu-") for name in annotated["workers"]["simulation"])
    assert all(name.startswith("cpu-") for name in annotated["workers"]["packing"])
    every_worker = {"gpu-0", "gpu-1", "cpu-0", "cpu-1"}
    for kind in ("simulation", "packing"):
        assert set(plain["workers"][kind]) <= every_worker


def test_demo_text_report_shows_both_runs():
    result = run_command([venv_script("hybrid"), "demo", "--simulations", "4", "--packings", "4",
                          "--gpu-workers", "1", "--cpu-workers", "1", "--no-progress"],
                         timeout=120)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert out.startswith("hybrid demo: 1 GPU-pool and 1 CPU-pool local workers, "
                          "4 simulations and 4 packings per run")
    on, off = out.split("annotation OFF")
    assert re.search(r"annotation ON\s+\(wall time \d+\.\d\d s\)", on)
    assert re.search(r"^\s+\(wall time \d+\.\d\d s\)", off)
    assert re.search(r"simulation\s+4 tasks, \d+\.\d{3} s each, ran on gpu-0: 4$", on, re.M), on
    assert re.search(r"packing\s+4 tasks, \d+\.\d{3} s each, ran on cpu-0: 4$", on, re.M), on
    for kind in ("simulation", "packing"):
        line = re.search(rf"{kind}\s+4 tasks, \d+\.\d{{3}} s each, ran on (.+)$", off, re.M)
        assert line, off
        counts = dict(part.split(": ") for part in line[1].split(", "))
        assert set(counts) <= {"gpu-0", "cpu-0"}
        assert sum(int(n) for n in counts.values()) == 4
