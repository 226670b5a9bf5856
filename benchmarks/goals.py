"""The goals of issue 14 (P1-P7), issue 26 (P8-P10), issue 27 (F1: the floor) and issue 20
(L1: like for like, H1: HTCondor on a shared filesystem), checked against one run's measures."""

from __future__ import annotations

from benchmarks.harness import Goal, Measure, Results, fmt, ratio

#: The variant each benchmark's ratios are taken against.
ANCHORS = {"scale-up": "dask-jobqueue", "submit": "dask-jobqueue", "close": "dask-jobqueue",
           "queue empty after close": "dask-jobqueue", "annotation": "not annotated",
           "post-match": "floor: bare-worker jobs", "reschedule": "submit",
           "until the first match": "floor: bare-worker jobs",
           "busy: over-submission": "dask-jobqueue", "busy: walltime": "dask-jobqueue",
           "busy: spill-over": "hybrid: busy pool alone"}


def _missing(goal: str, text: str, why: str) -> Goal:
    return Goal(goal, text, "-", None, why)


def _sizes(results: Results, system: str) -> list[str]:
    return sorted({m.config for m in results.measures
                   if m.benchmark == "scale-up" and m.system == system},
                  key=lambda c: int(c.split("=")[1]))


def scale_goals(results: Results, system: str, goal: str) -> list[Goal]:
    """P1 (HTCondor) / P3 (Slurm): 0.6x dask-jobqueue and 1.2x the floor (bare-worker jobs)
    at n=16, never slower than dask-jobqueue at any n."""
    out = []
    sizes = _sizes(results, system)
    if not sizes:
        return [_missing(goal, f"{system} scale-up", "not run: see the skips")]
    for config in sizes:
        ours = results.find("scale-up", system, config, "hybrid")
        anchor = results.find("scale-up", system, config, "dask-jobqueue")
        floor = results.find("scale-up", system, config, FLOOR)
        vs_anchor, vs_floor = ratio(ours, anchor), ratio(ours, floor)
        if config == "n=16":
            text = f"{system} {config}: <= 0.6x dask-jobqueue and <= 1.2x the floor"
            met = (None if vs_anchor is None or vs_floor is None
                   else vs_anchor <= 0.6 and vs_floor <= 1.2)
        else:
            text = f"{system} {config}: never slower than dask-jobqueue (<= 1.0x)"
            met = None if vs_anchor is None else vs_anchor <= 1.0
        value = (f"{_x(vs_anchor)} dask-jobqueue, {_x(vs_floor)} floor")
        out.append(Goal(goal, text, value, met,
                        "" if met is not None else "a variant did not run"))
    return out


#: The floor every launcher is held to (issue 27's B, plain TCP), and B whose workers connect
#: with TLS as hybrid's do by default.
FLOOR = "floor: bare-worker jobs"
FLOOR_TLS = "floor: bare-worker jobs (TLS)"


def floor_pairs(system: str) -> list[tuple[str, str]]:
    """Issue 27's F1, like for like: (hybrid's variant, the floor whose workers connect as
    that variant's do). hybrid's default (TLS with client certificates) against B with TLS,
    hybrid with plain TCP against plain B. On HTCondor the floor reads no file, so hybrid's
    like-for-like mode is ``hybrid shared fs``; its default (spool and transfer) is held to
    B with TLS too, and shown as such."""
    tls = ["hybrid shared fs", "hybrid"] if system == "htcondor" else ["hybrid"]
    plain = (["hybrid shared fs (plain TCP)"] if system == "htcondor"
             else ["hybrid (plain TCP)"])
    return [(v, FLOOR_TLS) for v in tls] + [(v, FLOOR) for v in plain]


def floor_goals(results: Results, system: str) -> list[Goal]:
    """Issue 27: hybrid within 5 % of the floor post-match (from the first match to n
    workers connected) at every n, each variant against the floor that starts its workers as
    it does (:func:`floor_pairs`); a pair neither side of which ran is left out."""
    def ran(variant: str) -> bool:
        return any(m.variant == variant and m.system == system for m in results.measures)

    pairs = [(v, f) for v, f in floor_pairs(system) if ran(v) or ran(f)]
    out = []
    for config, (variant, name) in ((c, p) for c in _sizes(results, system) for p in pairs):
        floor = results.find("post-match", system, config, name)
        r = ratio(results.find("post-match", system, config, variant), floor)
        raw = ratio(results.find("scale-up", system, config, variant),
                    results.find("scale-up", system, config, name))
        text = (f"{system} {config}: {variant} <= 1.05x the floor"
                f"{' with TLS' if name == FLOOR_TLS else ' (plain TCP)'} post-match")
        if variant == "hybrid" and system == "htcondor":
            text += " (spool and transfer: the default off a shared filesystem)"
        out.append(Goal("F1", text, f"{_x(r)} post-match, {_x(raw)} from submit",
                        None if r is None else r <= 1.05,
                        "" if r is not None else "a variant or its match did not run"))
    return out


def like_for_like_goals(results: Results, system: str) -> list[Goal]:
    """Issue 20: hybrid and dask-jobqueue started the same way (both with a nanny and a
    dashboard, both without): <= 0.8x at n=16, <= 1.0x at n=1, 4."""
    from benchmarks.scaleup import LIKE_FOR_LIKE, runs_on

    out = []
    for config in _sizes(results, system):
        limit = 0.8 if config == "n=16" else 1.0
        for ours, theirs in LIKE_FOR_LIKE:
            if not runs_on(ours, system):
                continue
            r = ratio(results.find("scale-up", system, config, ours),
                      results.find("scale-up", system, config, theirs))
            out.append(Goal("L1", f"{system} {config}: {ours} <= {limit}x {theirs}", _x(r),
                            None if r is None else r <= limit,
                            "" if r is not None else "a variant did not run"))
    return out


def shared_goals(results: Results) -> list[Goal]:
    """Issue 20: on HTCondor with a shared filesystem, n=1 <= 1.0x dask-jobqueue and 1000
    submissions < 0.5 s."""
    r = ratio(results.find("scale-up", "htcondor", "n=1", "hybrid shared fs"),
              results.find("scale-up", "htcondor", "n=1", "dask-jobqueue"))
    out = [Goal("H1", "htcondor n=1: hybrid shared fs <= 1.0x dask-jobqueue", _x(r),
                None if r is None else r <= 1.0, "" if r is not None else "not run")]
    submits = [m for m in results.measures if m.benchmark == "submit"
               and m.system == "htcondor" and m.variant == "hybrid shared fs"]
    median = submits[-1].median() if submits else None
    config = submits[-1].config.replace("n=", "") if submits else "1000"
    out.append(Goal("H1", f"htcondor: submit {config} workers, files read in place, < 0.5 s",
                    f"{fmt(median)} s", None if median is None else median < 0.5,
                    "" if median is not None else "not run"))
    return out


def submit_goal(results: Results, system: str, variant: str = "hybrid") -> Goal:
    """P2: at least 50x faster than per-job submits, under 0.5 s."""
    configs = [m for m in results.measures if m.benchmark == "submit" and m.system == system
               and m.variant == variant]
    text = f"{system}: submit n workers >= 50x faster than per-job submits, < 0.5 s"
    if variant != "hybrid":
        text += f" ({variant})"
    if not configs:
        return _missing("P2", text, "not run: see the skips")
    ours = configs[-1]
    anchor = results.find("submit", system, ours.config, "dask-jobqueue")
    speedup = ratio(anchor, ours)
    median = ours.median()
    met = None if speedup is None or median is None else speedup >= 50 and median < 0.5
    return Goal("P2", text.replace("n workers", ours.config.replace("n=", "") + " workers"),
                f"{fmt(median)} s, {_x(speedup)} faster", met,
                "" if met is not None else "a variant did not run")


def close_goal(results: Results, system: str, variant: str = "hybrid") -> Goal:
    """P7: close() under 1 s, every job gone within 1 s of it, at n=16."""
    text = f"{system} n=16: close() < 1 s and the queue empty < 1 s after it"
    if variant != "hybrid":
        text += f" ({variant})"
    close_times = results.find("close", system, "n=16", variant)
    gone_times = results.find("queue empty after close", system, "n=16", variant)
    if close_times is None or gone_times is None:
        return _missing("P7", text, "not run at n=16")
    close, gone = close_times.median(), gone_times.median()
    met = None if close is None or gone is None else close < 1 and gone < 1
    return Goal("P7", text, f"close {fmt(close)} s, gone {fmt(gone)} s later", met)


def annotation_goal(results: Results) -> list[Goal]:
    """P4: annotated tasks/s at least 0.9x not annotated."""
    out = []
    for m in results.measures:
        if m.benchmark == "annotation" and m.variant == "annotated":
            r = ratio(m, results.find("annotation", m.system, m.config, "not annotated"))
            out.append(Goal("P4", f"{m.config}: annotated >= 0.9x the tasks/s of plain",
                            f"{_x(r)}", None if r is None else r >= 0.9))
    return out or [_missing("P4", "annotated >= 0.9x plain", "not run")]


def reconcile_goal(results: Results) -> list[Goal]:
    """P6: one poll of 10,000 tracked jobs, history included, under 1 s."""
    out = []
    for m in results.measures:
        if m.benchmark == "reconcile" and m.variant == "poll (history)":
            median = m.median()
            size = int(m.config.split()[0])
            met = None if median is None else (median < 1 if size >= 10_000 else None)
            out.append(Goal("P6", f"{m.system} {m.config}: one poll with history < 1 s",
                            f"{fmt(median)} s", met,
                            "" if size >= 10_000 or median is None else
                            "fewer than 10,000 jobs: no verdict"))
    return out or [_missing("P6", "one poll of 10,000 jobs < 1 s", "not run")]


#: The GPU goals: P5 (issue 14) and P8-P10 (issue 26), by name: their text.
GPU_GOALS = {
    "P5": "GPU busy >= 90 % annotated; makespan <= 0.6x unannotated",
    "P8": "ns/day of the simulations sharing the GPU (default sharing) >= 3.5x one alone",
    "P9": "annotated makespan, default sharing <= 0.3x without sharing",
    "P10": "annotated makespan, default sharing <= 0.2x not annotated",
}


def gpu_goal(results: Results) -> list[Goal]:
    """P5 and P8-P10 from the gpu-md measures (see benchmarks/gpu.py)."""
    skip = next((s for s in results.skips if s.benchmark == "gpu-md"), None)
    measures = [m for m in results.measures if m.benchmark == "gpu-md"]
    alone = next((m for m in measures if m.variant == "one simulation alone: ns/day"), None)
    if skip is not None or alone is None:
        why = skip.why if skip else "not run"
        return [_missing(goal, text, why) for goal, text in GPU_GOALS.items()]
    if alone.system != "local GPU":
        return [_missing(goal, text, "ran on the CPU platform only (no GPU)")
                for goal, text in GPU_GOALS.items()]
    system, config = alone.system, alone.config

    def find(variant: str, at: str = config) -> Measure | None:
        return results.find("gpu-md", system, at, variant)

    off = next((m for m in measures if m.variant.startswith("not annotated: makespan")), None)
    small = off.config if off else config
    on_small = find("annotated, default: makespan", small)
    cut = off is not None and "cut off" in off.variant
    busy = find("annotated, default: GPU busy")
    b = busy.median() if busy else None
    vs_off = ratio(on_small, off)
    p5 = None if vs_off is None or b is None else vs_off <= 0.6 and b >= 90
    from hybrid.gpusharing import MPS_TASKS_PER_GPU

    # steady state: the default sharing's k simulations stepping at once (the sweep); the
    # workload's figure, over every moment a simulation stepped, is shown beside it
    together = ratio(find(f"MPS processes, {MPS_TASKS_PER_GPU} at once: ns/day"), alone)
    in_workload = ratio(find("annotated, default: ns/day together"), alone)
    p9 = ratio(find("annotated, default: makespan"), find("annotated, no sharing: makespan"))
    sliced = ratio(find("annotated, default: makespan"),
                   find("annotated, time-sliced x2: makespan"))
    bound = " (the unannotated run was cut off: an upper bound)" if cut else ""
    return [
        Goal("P5", GPU_GOALS["P5"], f"busy {fmt(b)} %, makespan {_x(vs_off)}{bound}", p5),
        Goal("P8", GPU_GOALS["P8"], f"{_x(together)} ({MPS_TASKS_PER_GPU} at once; over the "
             f"whole workload {_x(in_workload)})", None if together is None else together >= 3.5),
        Goal("P9", GPU_GOALS["P9"], f"{_x(p9)} (time-sliced x2: {_x(sliced)})",
             None if p9 is None else p9 <= 0.3),
        Goal("P10", GPU_GOALS["P10"], f"{_x(vs_off)}{bound}",
             None if vs_off is None else vs_off <= 0.2),
    ]


def reschedule_goal(results: Results) -> list[Goal]:
    """Issue 27: reschedule after submit only if it starts jobs sooner, idle queue and busy."""
    out = []
    for queue in ("idle queue", "busy queue"):
        r = ratio(results.find("reschedule", "htcondor", queue, "submit + reschedule"),
                  results.find("reschedule", "htcondor", queue, "submit"))
        out.append(Goal("R1", f"htcondor, {queue}: submit + reschedule starts a job sooner "
                        "than submit alone (median < 1.0x)", _x(r),
                        None if r is None else r < 1.0, "" if r is not None else "not run"))
    return out


def evaluate(results: Results) -> list[Goal]:
    """Every goal's verdict."""
    goals = [*scale_goals(results, "htcondor", "P1"), *scale_goals(results, "slurm", "P3")]
    for system in ("htcondor", "slurm"):
        goals += floor_goals(results, system) + like_for_like_goals(results, system)
    goals += shared_goals(results) + reschedule_goal(results)
    goals += [submit_goal(results, s) for s in ("htcondor", "slurm")]
    if any(m.benchmark == "submit" and m.variant == "hybrid transfer" for m in results.measures):
        goals.append(submit_goal(results, "htcondor", "hybrid transfer"))
    goals += [close_goal(results, s) for s in ("htcondor", "slurm")]
    goals += annotation_goal(results) + reconcile_goal(results) + gpu_goal(results)
    return goals


def _x(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


__all__ = ["ANCHORS", "Measure", "evaluate"]
