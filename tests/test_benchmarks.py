"""The benchmarks (``python -m benchmarks``) run, so they cannot rot.

Each test runs one benchmark's quick configuration as the command does, in its own process,
against the real pools, and checks that it measured something for every variant: the numbers
themselves are never judged here (the command never fails on a number).
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]


def run_benchmark(name: str, tmp_path: Path, *extra: str, timeout: float = 280
                  ) -> dict[str, Any]:
    """``python -m benchmarks --quick --only NAME``; its JSON, after checking the run."""
    out = tmp_path / f"{name}.json"
    result = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--quick", "--only", name, "--json", str(out),
         *extra], cwd=REPO, capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, f"{name} broke:\n{result.stdout}\n{result.stderr[-4000:]}"
    data = json.loads(out.read_text())
    assert not data["skips"], data["skips"]
    assert f"| {name} |" in result.stdout, result.stdout
    for measure in data["measures"]:
        if measure["variant"].startswith("floor") and measure["errors"]:
            continue  # the pool's own reference jobs timed out on a busy machine: no number
        assert measure["samples"], measure
        assert not measure["errors"], measure
        assert all(isinstance(s, float) and math.isfinite(s) and s >= 0
                   for s in measure["samples"]), measure
    return data


def variants(data: dict[str, Any], benchmark: str) -> set[tuple[str, str, str]]:
    """(system, config, variant) of every measure of ``benchmark``."""
    return {(m["system"], m["config"], m["variant"]) for m in data["measures"]
            if m["benchmark"] == benchmark}


def goals(data: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """The goal verdicts by goal name."""
    found: dict[str, list[dict[str, Any]]] = {}
    for goal in data["goals"]:
        found.setdefault(goal["goal"], []).append(goal)
    return found


@pytest.mark.htcondor
@pytest.mark.slurm
def test_scale_up_measures_every_variant_on_both_systems(htcondor_pool, slurm_cluster,
                                                         tmp_path):
    data = run_benchmark("scale-up", tmp_path, "--systems", "htcondor", "slurm")
    seen = variants(data, "scale-up")
    for system in ("htcondor", "slurm"):
        for n in (1, 2):
            for variant in ("hybrid", "hybrid (plain TCP)", "dask-jobqueue", "floor",
                            "floor: pool start", "floor: bare workers"):
                assert (system, f"n={n}", variant) in seen, (system, n, variant, seen)
            for benchmark in ("close", "queue empty after close"):
                assert (system, f"n={n}", "hybrid") in variants(data, benchmark)
                assert (system, f"n={n}", "hybrid (plain TCP)") in variants(data, benchmark)
    verdicts = goals(data)
    assert {g["goal"] for g in data["goals"]} >= {"P1", "P3", "P7"}
    assert all(g["met"] in (True, False) for g in verdicts["P1"] + verdicts["P3"])


@pytest.mark.htcondor
@pytest.mark.slurm
def test_submit_compares_one_transaction_with_per_job_submits(htcondor_pool, slurm_cluster,
                                                              tmp_path):
    data = run_benchmark("submit", tmp_path, "--systems", "htcondor", "slurm")
    assert variants(data, "submit") == {(s, "n=20", v) for s in ("htcondor", "slurm")
                                        for v in ("hybrid", "dask-jobqueue")}
    assert all(g["met"] in (True, False) for g in goals(data)["P2"])


@pytest.mark.htcondor
@pytest.mark.slurm
def test_reconcile_polls_with_the_history_and_matches_names(htcondor_pool, slurm_cluster,
                                                            tmp_path):
    data = run_benchmark("reconcile", tmp_path, "--systems", "htcondor", "slurm")
    for system in ("htcondor", "slurm"):
        assert variants(data, "reconcile") >= {
            (system, "100 jobs", v) for v in ("poll (history)", "poll", "match 1000 workers",
                                              "close")}


@pytest.mark.sge
def test_grid_engine_scale_up_beside_sgecluster_on_the_same_cell(sge_cell, tmp_path):
    data = run_benchmark("scale-up", tmp_path, "--systems", "sge")
    seen = variants(data, "scale-up")
    for n in (1, 2):
        for variant in ("hybrid", "dask-jobqueue", "floor", "floor: pool start",
                        "floor: bare workers"):
            assert ("sge", f"n={n}", variant) in seen, (n, variant, seen)
        for benchmark in ("close", "queue empty after close"):
            assert {("sge", f"n={n}", v) for v in ("hybrid", "dask-jobqueue")} <= variants(
                data, benchmark)


@pytest.mark.sge
def test_grid_engine_submit_and_reconcile(sge_cell, tmp_path):
    data = run_benchmark("submit", tmp_path, "--systems", "sge")
    assert variants(data, "submit") == {("sge", "n=20", v) for v in ("hybrid", "dask-jobqueue")}
    data = run_benchmark("reconcile", tmp_path, "--systems", "sge")
    assert variants(data, "reconcile") >= {
        ("sge", "100 jobs", v) for v in ("poll (history)", "poll", "match 1000 workers",
                                         "close")}


def test_annotation_measures_both_graphs_annotated_and_not(tmp_path):
    data = run_benchmark("annotation", tmp_path)
    assert variants(data, "annotation") == {
        ("local", f"{graph}, 200 tasks", v) for graph in ("map", "delayed")
        for v in ("annotated", "not annotated")}
    assert all(g["met"] in (True, False) for g in goals(data)["P4"])


def test_md_workload_runs_annotated_and_not(tmp_path):
    """On this machine (no GPU) the P5 workload runs on OpenMM's CPU platform: the code is
    exercised, and P5 says it was not measured."""
    raw_path = tmp_path / "gpu-raw.json"
    data = run_benchmark("gpu-md", tmp_path, "--md-on-cpu", "--gpu-json", str(raw_path))
    found = {variant for _, _, variant in variants(data, "gpu-md")}
    assert {"one simulation alone: ns/day", "annotated, default: makespan",
            "annotated, no sharing: makespan", "annotated, time-sliced x2: makespan",
            "time-sliced, 2 at once: ns/day", "not annotated: makespan"} <= found
    on_gpu = any(system == "local GPU" for system, _, _ in variants(data, "gpu-md"))
    for goal in ("P5", "P8", "P9", "P10"):
        assert (goals(data)[goal][0]["met"] is not None) == on_gpu
    raw = json.loads(raw_path.read_text())
    runs = [phase for phase in raw["phases"] if "simulations" in phase]
    assert runs and all(len(run["simulations"]) == 2 for run in runs)  # where each one ran
    if not raw["mps"][0]:  # no MPS here: the MPS settings are reported as not measured
        assert {s["what"] for s in raw["skipped"]} == {"MPS processes: ns/day",
                                                      "MPS threads: ns/day"}


def test_md_demo_routes_openmm_to_the_gpu_pool_and_packmol_to_the_cpu_pool():
    """``hybrid demo --workload md``: real OpenMM and packmol, routed by the annotator (on
    this machine's CPU platform: no GPU here)."""
    result = subprocess.run(
        [str(Path(sys.executable).with_name("hybrid")), "demo", "--workload", "md", "--json",
         "--simulations", "2", "--packings", "1", "--waters", "100", "--steps", "50",
         "--gpu-workers", "1", "--cpu-workers", "1"],
        cwd=REPO, capture_output=True, text=True, timeout=240)
    assert result.returncode == 0, result.stderr[-4000:]
    annotated, plain = json.loads(result.stdout)
    assert (annotated["annotated"], plain["annotated"]) == (True, False)
    assert annotated["workers"] == {"simulation": {"gpu-0": 2}, "packing": {"cpu-0": 1},
                                    "preparation": {"cpu-0": 1}}
    for run in (annotated, plain):
        assert run["platforms"] == {"CPU": 2}
        assert len(run["ns_per_day"]) == 2 and all(v > 0 for v in run["ns_per_day"])


def test_busy_simulator_measures_every_scenario(tmp_path):
    """The batch-queue simulator's scenarios at their quick size (no pool needed)."""
    data = run_benchmark("busy-sim", tmp_path)
    configs = {config for _, config, _ in variants(data, "busy-sim")}
    assert {"8 h of work, walltime 1 h", "burst on a slow pool",
            "evictions, 1 per job-hour"} <= configs
    found = {variant for _, _, variant in variants(data, "busy-sim")}
    assert {"hybrid", "dask-jobqueue model", "hybrid, no lifetime", "requeued", "preempted",
            "busy pool alone", "busy + fast pool", "decision CPU time: p99",
            "run: wall time"} <= found
    assert goals(data)["B4"][0]["met"] is None  # quick size: no verdict


@pytest.mark.htcondor
@pytest.mark.slurm
@pytest.mark.timeout(900)
def test_busy_pools_compare_hybrid_and_dask_jobqueue(htcondor_pool, slurm_cluster, tmp_path):
    data = run_benchmark("busy", tmp_path, timeout=840)
    for system in ("htcondor", "slurm"):
        assert {v for s, _, v in variants(data, "busy: over-submission") if s == system} == {
            "hybrid", "dask-jobqueue"}
    assert {v for _, _, v in variants(data, "busy: walltime")} == {"hybrid", "dask-jobqueue"}
    assert {v for _, _, v in variants(data, "busy: spill-over")} == {
        "hybrid: busy pool alone", "hybrid: busy + fast pool",
        "dask-jobqueue: busy pool alone"}
    verdicts = goals(data)
    assert all(g["met"] in (True, False) for g in verdicts["B1"] + verdicts["B3"])
