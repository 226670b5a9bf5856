"""The benchmarks (``python -m benchmarks``) run, so they cannot rot.

Each test runs one benchmark's quick configuration as the command does, in its own process,
against the real pools, and checks that it measured something for every variant: the numbers
themselves are never judged here (the command never fails on a number).
"""

from __future__ import annotations

import itertools
import json
import math
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import htcondor2
import pytest

from benchmarks.scaleup import NAMES, runs_on, schedule
from tests.batch.test_real_pools import wait_for

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
    # a row of the benchmark, or of one of its parts ("busy: walltime")
    assert f"| {name} |" in result.stdout or f"| {name}: " in result.stdout, result.stdout
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


@pytest.mark.alongside  # (the benchmark's own jobs, no slot limit)
@pytest.mark.htcondor
@pytest.mark.slurm
@pytest.mark.timeout(600)
def test_scale_up_measures_every_variant_on_both_systems(htcondor_pool, slurm_cluster,
                                                         tmp_path):
    data = run_benchmark("scale-up", tmp_path, "--systems", "htcondor", "slurm", timeout=580)
    seen = variants(data, "scale-up")
    for system in ("htcondor", "slurm"):
        for variant in NAMES:
            if not runs_on(variant, system):
                assert (system, "n=2", variant) not in seen, (system, variant)
                continue
            assert (system, "n=2", variant) in seen, (system, variant, seen)
            # every variant's post-match time: its first match was found
            assert (system, "n=2", variant) in variants(data, "post-match"), variant
        for benchmark in ("close", "queue empty after close"):
            assert (system, "n=2", "hybrid") in variants(data, benchmark)
    assert ("slurm", "n=2", "hybrid shared fs") not in seen
    assert not runs_on("hybrid shared fs with nanny", "slurm")
    # the post-match time is a part of the time from submit, the rest the wait for the match
    for m in data["measures"]:
        if m["benchmark"] == "scale-up" and m["samples"]:
            total, = m["samples"]
            part, = m["extra"]["post-match"]
            wait, = m["extra"]["match"]
            assert 0 < part <= total and abs(part + wait - total) < 1e-6, m
    verdicts = goals(data)
    assert {g["goal"] for g in data["goals"]} >= {"P1", "P3", "F1", "L1", "H1"}
    assert all(g["met"] in (True, False) for g in verdicts["P1"] + verdicts["P3"]
               + verdicts["F1"] + verdicts["L1"])


def test_scale_up_order_really_rotates():
    """Consecutive configurations start with different variants, each configuration starts
    with another variant in its next repetition, and every variant runs once per
    configuration and repetition (issue 27: the order used never to change)."""
    per_system = {system: [n for n in NAMES if runs_on(n, system)]
                  for system in ("htcondor", "slurm")}
    assert "hybrid shared fs" not in per_system["slurm"]
    for sizes in ([1, 4, 16], [2], [1, 4]):
        for systems in (["htcondor", "slurm"], ["slurm"], ["htcondor"]):
            order = list(schedule(systems, sizes, 8, per_system))
            configs: dict[tuple[int, str, int], list[str]] = {}
            for repetition, system, n, variant in order:
                configs.setdefault((repetition, system, n), []).append(variant)
            for (_, system, _), ran in configs.items():
                assert sorted(ran) == sorted(per_system[system])
            firsts = [ran[0] for ran in configs.values()]
            assert all(a != b for a, b in itertools.pairwise(firsts)), (sizes, systems, firsts)
            for (repetition, system, n), ran in configs.items():
                later = configs.get((repetition + 1, system, n))
                if later:
                    assert later[0] != ran[0], (system, n, repetition)
            # over as many repetitions as variants, each variant leads each configuration
            for system in systems:
                for n in sizes:
                    leaders = {configs[(r, system, n)][0]
                               for r in range(len(per_system[system])) if (r, system, n)
                               in configs}
                    assert len(leaders) >= min(8, len(per_system[system])) - 1, leaders


@pytest.mark.htcondor
@pytest.mark.slurm
def test_submit_compares_one_transaction_with_per_job_submits(htcondor_pool, slurm_cluster,
                                                              tmp_path):
    data = run_benchmark("submit", tmp_path, "--systems", "htcondor", "slurm")
    assert variants(data, "submit") == {(s, "n=20", v) for s in ("htcondor", "slurm")
                                        for v in ("hybrid", "dask-jobqueue")} | {
        ("htcondor", "n=20", "hybrid shared fs"), ("htcondor", "n=20", "hybrid transfer")}
    assert all(g["met"] in (True, False) for g in goals(data)["P2"])
    # the transfer mode's own verdict, beside the default's on each system
    assert len(goals(data)["P2"]) == 3
    assert sum("(hybrid transfer)" in g["text"] for g in goals(data)["P2"]) == 1
    shared_submit = [g for g in goals(data)["H1"] if "submit" in g["text"]]
    assert len(shared_submit) == 1 and shared_submit[0]["met"] in (True, False)


@pytest.mark.htcondor
def test_reschedule_measures_both_arms_in_an_idle_and_a_busy_queue(htcondor_pool, tmp_path):
    data = run_benchmark("reschedule", tmp_path)
    assert variants(data, "reschedule") == {
        ("htcondor", queue, arm) for queue in ("idle queue", "busy queue")
        for arm in ("submit", "submit + reschedule")}
    assert all(g["met"] in (True, False) for g in goals(data)["R1"])
    # the busy queue's jobs were removed, and leave the queue
    from benchmarks.reschedule import MARKER_PREFIX

    # (only this benchmark's: the `alongside` lane's benchmarks may have jobs queued now)
    wait_for(lambda: not htcondor2.Schedd().query(f'regexp("^{MARKER_PREFIX}", BenchMarker)',
                                                  ["ProcId"]),
             120, "the benchmark's jobs to leave the queue")


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
@pytest.mark.timeout(600)
def test_grid_engine_scale_up_beside_sgecluster_on_the_same_cell(sge_cell, tmp_path):
    data = run_benchmark("scale-up", tmp_path, "--systems", "sge", timeout=580)
    seen = variants(data, "scale-up")
    for variant in NAMES:
        if not runs_on(variant, "sge"):
            assert ("sge", "n=2", variant) not in seen
            continue
        assert ("sge", "n=2", variant) in seen, (variant, seen)
        # the post-match time from the first task's sge_shepherd
        assert ("sge", "n=2", variant) in variants(data, "post-match"), variant
    for benchmark in ("close", "queue empty after close"):
        assert {("sge", "n=2", v) for v in ("hybrid", "dask-jobqueue")} <= variants(
            data, benchmark)
    for m in data["measures"]:
        if m["benchmark"] == "scale-up" and m["samples"]:
            total, = m["samples"]
            part, = m["extra"]["post-match"]
            assert 0 < part <= total, m


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


def test_the_gpu_benchmarks_sizes_come_from_quick_then_the_options():
    """A lent GPU's minutes are few: a run can pick its steps, settings and sweep."""
    from benchmarks.__main__ import gpu_options, parser
    from benchmarks.gpu import run

    args = parser().parse_args(["--only", "gpu-md", "--gpu-steps", "50000", "--gpu-settings",
                                "default", "no sharing", "--gpu-sweep", "8"])
    assert gpu_options(args, quick=False) == {"steps": 50_000, "settings": (
        "default", "no sharing"), "sweep": (8,)}
    quick = gpu_options(parser().parse_args(["--gpu-sweep"]), quick=True)
    assert quick["sweep"] == () and quick["steps"] == 50  # no sweep; quick's own steps
    unknown = re.escape("settings: ['MPS x8'] are not sharing settings")
    with pytest.raises(ValueError, match=unknown):
        run(None, 1, settings=("default", "MPS x8"))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=re.escape("steps (0) and the sweep's k")):
        run(None, 1, steps=0)  # type: ignore[arg-type]


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
            "decision CPU time, hybrid's own: p99", "run: wall time",
            "decision CPU time, hybrid's own, each decision's least of 1 run(s): max"} <= found
    assert goals(data)["B4"][0]["met"] is None  # quick size: no verdict


# The busy benchmark's quick run in three parts, each with the pools it uses (so that the
# parallel suite's lanes run them beside other pools' tests: tests/conftest.py POOL_LANES).
@pytest.mark.slurm
@pytest.mark.timeout(600)
def test_busy_slurm_compares_over_submission_and_walltime_with_dask_jobqueue(
        slurm_cluster, tmp_path):
    data = run_benchmark("busy", tmp_path, "--systems", "slurm",
                         "--busy-parts", "over-submission", "walltime", timeout=540)
    assert variants(data, "busy: over-submission") == {
        ("slurm", "18 tasks, maximum 6, 2 slots", v) for v in ("hybrid", "dask-jobqueue")}
    assert {v for _, _, v in variants(data, "busy: walltime")} == {"hybrid", "dask-jobqueue"}
    verdicts = goals(data)
    assert [g["met"] in (True, False) for g in verdicts["B1"]] == [True]
    assert "B3" not in verdicts


@pytest.mark.htcondor
@pytest.mark.timeout(300)
def test_busy_htcondor_compares_over_submission_with_dask_jobqueue(htcondor_pool, tmp_path):
    data = run_benchmark("busy", tmp_path, "--systems", "htcondor",
                         "--busy-parts", "over-submission", timeout=240)
    assert variants(data, "busy: over-submission") == {
        ("htcondor", "18 tasks, maximum 6, 2 slots", v) for v in ("hybrid", "dask-jobqueue")}
    assert not variants(data, "busy: walltime")  # (a Slurm part)
    assert [g["met"] in (True, False) for g in goals(data)["B1"]] == [True]


@pytest.mark.alongside  # (the benchmark's own jobs, no slot limit)
@pytest.mark.htcondor
@pytest.mark.slurm
@pytest.mark.timeout(600)
def test_busy_spill_over_from_slurm_to_htcondor_is_measured(htcondor_pool, slurm_cluster,
                                                            tmp_path):
    data = run_benchmark("busy", tmp_path, "--systems", "htcondor", "slurm",
                         "--busy-parts", "spill-over", timeout=540)
    assert {v for _, _, v in variants(data, "busy: spill-over")} == {
        "hybrid: busy pool alone", "hybrid: busy + fast pool",
        "dask-jobqueue: busy pool alone"}
    assert not variants(data, "busy: over-submission")
    verdicts = goals(data)
    assert [g["met"] in (True, False) for g in verdicts["B3"]] == [True]


def test_like_for_like_goals_read_each_systems_own_variants():
    """L1's verdicts: n = 16 is held to 0.8x, n = 1 and 4 to 1.0x; a pair whose hybrid
    variant never runs on the system (the shared-filesystem modes off HTCondor) gives no
    verdict there, one that should have run but did not is said to be missing."""
    from benchmarks.goals import like_for_like_goals
    from benchmarks.harness import Results

    results = Results()
    for system in ("htcondor", "slurm"):
        for config, ours, theirs in (("n=1", 0.9, 1.0), ("n=16", 8.5, 10.0)):
            results.measure("scale-up", system, config, "dask-jobqueue").samples.append(theirs)
            results.measure("scale-up", system, config,
                            "hybrid with nanny").samples.append(ours)
    results.measure("scale-up", "htcondor", "n=1",
                    "hybrid shared fs with nanny").samples.append(1.2)
    htcondor = {g.text: g for g in like_for_like_goals(results, "htcondor")}
    slurm = {g.text: g for g in like_for_like_goals(results, "slurm")}
    assert htcondor["htcondor n=1: hybrid with nanny <= 1.0x dask-jobqueue"].met is True
    assert htcondor["htcondor n=16: hybrid with nanny <= 0.8x dask-jobqueue"].met is False
    assert htcondor["htcondor n=1: hybrid shared fs with nanny <= 1.0x dask-jobqueue"].met \
        is False
    missing = htcondor["htcondor n=16: hybrid shared fs with nanny <= 0.8x dask-jobqueue"]
    assert missing.met is None and missing.why == "a variant did not run"
    assert not [text for text in slurm if "shared fs" in text]
    assert "slurm n=1: hybrid with nanny (fork) <= 1.0x dask-jobqueue" in slurm


def test_floor_goals_hold_each_variant_to_the_floor_that_connects_as_it_does():
    """F1, like for like: hybrid's default (TLS) against B with TLS, hybrid with plain TCP
    against plain B (never TLS against plain), post-match; a pair neither side of which ran
    gives no verdict, one side missing is said to be missing."""
    from benchmarks.goals import FLOOR, FLOOR_TLS, floor_goals
    from benchmarks.harness import Results

    results = Results()
    for benchmark in ("scale-up", "post-match"):
        for variant, seconds in (("hybrid", 4.2), (FLOOR_TLS, 4.1), (FLOOR, 3.5),
                                 ("hybrid (plain TCP)", 3.9)):
            results.measure(benchmark, "slurm", "n=16", variant).samples.append(seconds)
        results.measure(benchmark, "htcondor", "n=16", "hybrid shared fs").samples.append(3.6)
    slurm = {g.text: g for g in floor_goals(results, "slurm")}
    assert set(slurm) == {
        "slurm n=16: hybrid <= 1.05x the floor with TLS post-match",
        "slurm n=16: hybrid (plain TCP) <= 1.05x the floor (plain TCP) post-match"}
    assert slurm["slurm n=16: hybrid <= 1.05x the floor with TLS post-match"].met is True
    plain = slurm["slurm n=16: hybrid (plain TCP) <= 1.05x the floor (plain TCP) post-match"]
    assert plain.met is False and plain.value.startswith("1.11x post-match")
    htcondor = {g.text: g for g in floor_goals(results, "htcondor")}
    assert list(htcondor) == ["htcondor n=16: hybrid shared fs <= 1.05x the floor with TLS "
                              "post-match"]
    assert htcondor[next(iter(htcondor))].why == "a variant or its match did not run"


def test_worker_dask_config_keeps_hybrids_own_worker_settings():
    """A variant that adds one worker setting keeps those hybrid exports by default (the
    memory-watch variant once replaced them all)."""
    from benchmarks.launchers import worker_dask_config

    settings = worker_dask_config({"distributed.worker.multiprocessing-method": "fork"})
    exported = settings["hybrid.worker-dask-config"]
    assert exported["distributed.worker.multiprocessing-method"] == "fork"
    assert exported["distributed.worker.daemon"] is False
    assert exported["distributed.comm.timeouts.connect"] == "60s"


def test_connected_is_when_the_scheduler_registered_the_last_worker():
    """The scale-up's end is the scheduler's own ``add-worker`` event of the n-th worker (a
    REAL scheduler and workers), not the client's 0.1 s polling: it lies between the start
    and the moment the wait returned, and without events the wait's moment stands."""
    from distributed import Client, LocalCluster

    from benchmarks import postmatch

    with LocalCluster(n_workers=0, processes=False, protocol="tcp://", host="127.0.0.1",
                      dashboard_address=None,
                      scheduler_kwargs={"dashboard_address": "127.0.0.1:0"}) as cluster, \
            Client(cluster, set_as_default=False) as client:
        start = postmatch.now()
        cluster.scale(2)
        client.wait_for_workers(2, timeout=60)
        noticed = postmatch.now()  # after the poll that saw both: after they registered
        connected = postmatch.registered(client, 2, noticed)
        assert start < connected < noticed
        assert postmatch.registered(client, 3, noticed) == noticed  # no third worker
