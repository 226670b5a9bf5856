"""P1, P3, P7 and issue 27: ``scale(n)`` -> ``client.wait_for_workers(n)``, per system.

Variants, each one repetition per configuration (system, n), interleaved:

- ``hybrid`` (A): a :class:`hybrid.HybridCluster` with one pool on the system, its defaults
  (TLS with client certificates, a temporary CA made for each cluster; no nanny, no worker
  dashboard; on HTCondor the job's files are spooled and transferred).
- ``hybrid (plain TCP)``: the same with ``security=False``: what TLS costs.
- ``hybrid without memory watch``: the same as ``hybrid`` with Dask's
  ``distributed.worker.memory.terminate: false`` for the workers, so the job script does not
  watch the worker's memory (every 0.5 s): what the watch costs.
- ``hybrid with nanny``: the same as ``hybrid`` with a nanny and a dashboard per worker, as
  dask-jobqueue's.
- ``hybrid with nanny (fork)``: the same as ``hybrid with nanny`` with Dask's
  ``distributed.worker.multiprocessing-method: fork`` for the workers: each nanny forks its
  worker instead of spawning a fresh python that imports Dask again.
- ``hybrid shared fs`` (HTCondor only): ``job_files: shared`` from a staging directory in the
  pool's shared filesystem, run by the pool's job user: no spooling, no file transfer.
  ``hybrid shared fs without memory watch``: the same without the watch, as above;
  ``hybrid shared fs (plain TCP)``: the same with plain TCP, as the floor B's workers.
- ``hybrid transfer`` (HTCondor only): ``job_files: transfer``, run as ``hybrid shared fs``:
  not spooled, the local schedd transfers the files from the staging directory to each job.
- ``hybrid shared fs with nanny`` (HTCondor only): the same with a nanny and a dashboard per
  worker: started as dask-jobqueue's, whose HTCondor jobs read their files in place too;
  ``hybrid shared fs with nanny (fork)``: and each nanny forks its worker.
- ``dask-jobqueue`` (D): ``HTCondorCluster`` / ``SLURMCluster`` / ``SGECluster`` with its
  defaults (a nanny and a dashboard per worker).
- ``dask-jobqueue without nanny``: the same with ``nanny=False`` and ``--no-dashboard``, as
  hybrid's.
- ``floor: bare-worker jobs`` (B) and ``floor: batch start`` (C): :mod:`benchmarks.floors`.

Every worker has one thread and 1 GiB. Each repetition records, beside the scale-up time,
``match`` (submit to the batch system's first match) and ``post-match`` (that match to n
workers connected: :mod:`benchmarks.postmatch`), ``close`` and ``gone`` (from ``close()``
returning until the batch system lists none of the jobs).

The order of the variants rotates by one from each configuration to the next
(:func:`schedule`), and on HTCondor each repetition starts after a random pause of up to one
negotiation cycle, so no variant always meets the same phase of the batch system's cycles.
"""

from __future__ import annotations

import contextlib
import random
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from benchmarks import floors, launchers, realpools
from benchmarks.harness import Results, log, repeat, rotated


@dataclass(frozen=True)
class Variant:
    """One way of getting n workers."""

    name: str
    run: Callable[[str, int, Path], dict[str, float]]
    systems: tuple[str, ...] = ("htcondor", "slurm", "sge")
    #: What it needs besides the pool: "dask-jobqueue", or "shared" (on HTCondor, the pool's
    #: shared directory: a job directory the jobs see at this host's path).
    needs: str | None = None


VARIANTS: tuple[Variant, ...] = (
    Variant("hybrid", launchers.hybrid_once),
    Variant("hybrid (plain TCP)", lambda s, n, d: launchers.hybrid_once(s, n, d, tls=False)),
    Variant("hybrid without memory watch", lambda s, n, d: launchers.hybrid_once(
        s, n, d, settings=launchers.worker_dask_config(
            {"distributed.worker.memory.terminate": False}))),
    Variant("hybrid with nanny", lambda s, n, d: launchers.hybrid_once(
        s, n, d, nanny=True, dashboard=True)),
    Variant("hybrid with nanny (fork)", lambda s, n, d: launchers.hybrid_once(
        s, n, d, nanny=True, dashboard=True,
        settings=launchers.worker_dask_config(launchers.FORK))),
    Variant("hybrid shared fs", launchers.hybrid_shared_once, ("htcondor",), "shared"),
    Variant("hybrid shared fs without memory watch", lambda s, n, d: launchers.hybrid_shared_once(
        s, n, d, watch=False), ("htcondor",), "shared"),
    Variant("hybrid shared fs (plain TCP)", lambda s, n, d: launchers.hybrid_shared_once(
        s, n, d, tls=False), ("htcondor",), "shared"),
    Variant("hybrid transfer", lambda s, n, d: launchers.hybrid_shared_once(
        s, n, d, transfer=True), ("htcondor",), "shared"),
    Variant("hybrid shared fs with nanny", lambda s, n, d: launchers.hybrid_shared_once(
        s, n, d, nanny=True), ("htcondor",), "shared"),
    Variant("hybrid shared fs with nanny (fork)", lambda s, n, d: launchers.hybrid_shared_once(
        s, n, d, nanny=True, fork=True), ("htcondor",), "shared"),
    Variant("dask-jobqueue", launchers.jobqueue_once, needs="dask-jobqueue"),
    Variant("dask-jobqueue without nanny", lambda s, n, d: launchers.jobqueue_once(
        s, n, d, nanny=False, dashboard=False), needs="dask-jobqueue"),
    Variant("floor: bare-worker jobs", lambda s, n, d: floors.bare_worker_jobs(s, n),
            needs="shared"),
    Variant("floor: bare-worker jobs (TLS)",
            lambda s, n, d: floors.bare_worker_jobs(s, n, tls=True), needs="shared"),
    Variant("floor: batch start", lambda s, n, d: floors.batch_start(s, n), needs="shared"),
)
#: The variants' names, in the order of the tables.
NAMES = tuple(v.name for v in VARIANTS)
#: Like-for-like pairs: (hybrid's variant, dask-jobqueue's variant started the same way).
#: On HTCondor, dask-jobqueue's jobs read their files in place: ``hybrid shared fs`` is
#: hybrid's mode for that, its default (spooled and transferred) is shown too.
LIKE_FOR_LIKE = (("hybrid with nanny", "dask-jobqueue"),
                 ("hybrid with nanny (fork)", "dask-jobqueue"),
                 ("hybrid shared fs with nanny", "dask-jobqueue"),
                 ("hybrid shared fs with nanny (fork)", "dask-jobqueue"),
                 ("hybrid", "dask-jobqueue without nanny"),
                 ("hybrid shared fs", "dask-jobqueue without nanny"))


def runs_on(variant: str, system: str) -> bool:
    """Whether ``variant`` is measured on ``system`` at all."""
    return any(v.name == variant and system in v.systems for v in VARIANTS)


def schedule(systems: list[str], sizes: list[int], repeats: int,
             variants: dict[str, list[str]]) -> Iterator[tuple[int, str, int, str]]:
    """(repetition, system, n, variant) in the order they run.

    Every configuration (system, n) runs each of its system's ``variants`` once per
    repetition. The order rotates by one from each configuration to the next and, for the same
    configuration, from one repetition to the next (a step further where that would repeat
    the variant that just came first, or the one that came first in this configuration last
    time): consecutive configurations start with different variants, and each variant comes
    first in turn."""
    previous: str | None = None
    led: dict[tuple[str, int], str] = {}  # what came first in each configuration last time
    for repetition in range(repeats):
        position = 0
        for system in systems:
            for n in sizes:
                names = variants[system]
                avoid = {previous, led.get((system, n))}
                shift = next((k for k in range(len(names))
                              if rotated(names, repetition + position + k)[0] not in avoid), 0)
                order = rotated(names, repetition + position + shift)
                yield from ((repetition, system, n, variant) for variant in order)
                if order:
                    previous = led[(system, n)] = order[0]
                position += 1


def negotiation_cycle() -> float:
    """The HTCondor pool's ``NEGOTIATOR_CYCLE_DELAY`` in seconds, asked of its negotiator
    (this node's client configuration need not set it); HTCondor's default, 20, if unknown."""
    try:
        import htcondor2

        negotiator = htcondor2.Collector().locate(htcondor2.DaemonType.Negotiator)
        value = htcondor2.RemoteParam(negotiator).get("NEGOTIATOR_CYCLE_DELAY")
        return float(value or htcondor2.param.get("NEGOTIATOR_CYCLE_DELAY") or 20)
    except Exception:
        return 20.0


def run(results: Results, systems: list[str], sizes: list[int], repeats: int,
        variants: list[str], jitter: bool = True, seed: int | None = None) -> None:
    """Every (system, n, variant), ``repeats`` times, interleaved."""
    available = []
    for system in systems:
        problem = realpools.problem(system)
        if problem:
            results.skip(f"scale-up ({system})", problem)
        else:
            available.append(system)
    if not available:
        return
    by_name = {v.name: v for v in VARIANTS}
    chosen = [by_name[name] for name in variants]
    if any(v.needs == "dask-jobqueue" for v in chosen) and (
            problem := realpools.jobqueue_problem()):
        results.skip("scale-up (dask-jobqueue)", problem)
        chosen = [v for v in chosen if v.needs != "dask-jobqueue"]
    per_system = {s: [v.name for v in chosen if s in v.systems] for s in available}
    if "htcondor" in available and any(v.needs == "shared" for v in chosen) and (
            problem := realpools.shared_problem()):
        unable = [v.name for v in chosen if v.needs == "shared"]
        results.skip(f"scale-up htcondor ({', '.join(unable)})", problem)
        per_system["htcondor"] = [v for v in per_system["htcondor"] if v not in unable]
    cycle = negotiation_cycle() if "htcondor" in available else 0.0
    pick = random.Random(seed)
    results.settings["scale-up order"] = "rotating by one per configuration"
    with tempfile.TemporaryDirectory(prefix="hybrid-bench-") as tmp, \
            realpools.condor_tools() if "htcondor" in available else contextlib.nullcontext():
        staging = Path(tmp)
        last = None
        for repetition, system, n, name in schedule(available, sizes, repeats, per_system):
            if repetition != last:
                log(f"scale-up: repetition {repetition + 1} of {repeats}")
                last = repetition
            if jitter and system == "htcondor":
                time.sleep(pick.uniform(0, cycle))  # a random phase of the negotiation cycle
            measure = results.measure("scale-up", system, f"n={n}", name)
            repeat(measure, lambda v=by_name[name], s=system, k=n: v.run(s, k, staging))
    split_extras(results)


#: Extra numbers of a scale-up repetition -> the benchmark of their own rows.
EXTRAS = {"close": "close", "gone": "queue empty after close", "post-match": "post-match",
          "match": "until the first match"}


def split_extras(results: Results) -> None:
    """Give the close times, the queue times and the match times rows of their own."""
    for m in list(results.measures):
        if m.benchmark != "scale-up":
            continue
        for key, benchmark in EXTRAS.items():
            if key in m.extra:
                results.measure(benchmark, m.system, m.config, m.variant).samples = list(
                    m.extra[key])


def summary(results: Results) -> str:
    """The scale-up at a glance: per system and n, each variant's median from submit and
    post-match (``from submit (post-match)``), then the ratios the goals read."""
    from benchmarks.harness import fmt, ratio

    rows = sorted({(m.system, m.config) for m in results.measures
                   if m.benchmark == "scale-up"},
                  key=lambda k: (k[0], int(k[1].split("=")[1])))
    if not rows:
        return ""
    shown = [name for name in NAMES if any(m.benchmark == "scale-up" and m.variant == name
                                          for m in results.measures)]

    def cell(system: str, config: str, variant: str) -> str:
        raw = results.find("scale-up", system, config, variant)
        post = results.find("post-match", system, config, variant)
        if raw is None:
            return ""
        text = fmt(raw.median())
        return text + (f" ({fmt(post.median())})" if post is not None else "")

    lines = ["Medians in seconds from submit to n workers connected (in parentheses: from "
             "the batch system's first match, post-match):", "",
             "| system | n | " + " | ".join(shown) + " |",
             "|---|---|" + "---|" * len(shown)]
    for system, config in rows:
        lines.append(f"| {system} | {config[2:]} | "
                     + " | ".join(cell(system, config, v) for v in shown) + " |")
    pairs = [("hybrid", "floor: bare-worker jobs", "hybrid / B"),
             ("hybrid shared fs", "floor: bare-worker jobs", "shared fs / B"),
             ("hybrid (plain TCP)", "floor: bare-worker jobs", "plain TCP / B (like for like)"),
             ("hybrid shared fs (plain TCP)", "floor: bare-worker jobs",
              "shared fs (plain TCP) / B (like for like)"),
             ("hybrid", "floor: bare-worker jobs (TLS)", "hybrid / B with TLS (like for like)"),
             ("hybrid shared fs", "floor: bare-worker jobs (TLS)",
              "shared fs / B with TLS (like for like)"),
             ("hybrid", "dask-jobqueue", "hybrid / D"),
             ("hybrid shared fs", "dask-jobqueue", "shared fs / D"),
             ("hybrid with nanny", "dask-jobqueue", "with nanny / D (like for like)"),
             ("hybrid with nanny (fork)", "dask-jobqueue", "with nanny (fork) / D"),
             ("hybrid shared fs with nanny", "dask-jobqueue", "shared fs with nanny / D"),
             ("hybrid shared fs with nanny (fork)", "dask-jobqueue",
              "shared fs with nanny (fork) / D"),
             ("hybrid", "dask-jobqueue without nanny", "hybrid / D without nanny (like for like)")]
    lines += ["", "Ratios of the medians, from submit (post-match):", "",
              "| system | n | " + " | ".join(p[2] for p in pairs) + " |",
              "|---|---|" + "---|" * len(pairs)]
    for system, config in rows:
        cells = []
        for ours, theirs, _ in pairs:
            raw = ratio(results.find("scale-up", system, config, ours),
                        results.find("scale-up", system, config, theirs))
            post = ratio(results.find("post-match", system, config, ours),
                         results.find("post-match", system, config, theirs))
            cells.append("" if raw is None else f"{raw:.2f}"
                         + ("" if post is None else f" ({post:.2f})"))
        lines.append(f"| {system} | {config[2:]} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def parts(results: Results) -> str:
    """Where hybrid's time goes, per system and n, from differences of medians: the batch
    system's cycle until the first match, its start of a trivial job after the match (C),
    a bare worker's python start and connect (B - C), hybrid's own part (A - B, post-match),
    and on HTCondor the file transfer of the default mode (A - A shared fs, post-match)."""
    from benchmarks.harness import fmt

    def median(benchmark: str, system: str, config: str, variant: str) -> float | None:
        m = results.find(benchmark, system, config, variant)
        return m.median() if m is not None else None

    def minus(a: float | None, b: float | None) -> str:
        return fmt(a - b) if a is not None and b is not None else ""

    rows = sorted({(m.system, m.config) for m in results.measures
                   if m.benchmark == "post-match"}, key=lambda k: (k[0], int(k[1][2:])))
    if not rows:
        return ""
    lines = ["Where the time goes (seconds, differences of medians):", "",
             "| system | n | until the first match (hybrid) | trivial jobs started after it "
             "(C) | python start and connect of bare workers (B - C) | hybrid's own, shared "
             "fs (A - B) | hybrid's own, default (A - B) | file transfer (A - A shared fs) |",
             "|---|---|---|---|---|---|---|---|"]
    for system, config in rows:
        def post(variant: str, s: str = system, c: str = config) -> float | None:
            return median("post-match", s, c, variant)

        bare, trivial = post(FLOOR_B), post(FLOOR_C)
        shared, default = post("hybrid shared fs"), post("hybrid")
        lines.append(
            f"| {system} | {config[2:]} | "
            f"{fmt(median('until the first match', system, config, 'hybrid'))} | "
            f"{fmt(trivial)} | {minus(bare, trivial)} | {minus(shared, bare)} | "
            f"{minus(default, bare)} | {minus(default, shared)} |")
    return "\n".join(lines)


FLOOR_B, FLOOR_C = "floor: bare-worker jobs", "floor: batch start"
