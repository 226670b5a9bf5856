"""``hybrid demo``: GPU-style simulations and CPU box packing on local GPU and CPU pools.

It runs the same mixed workload twice on one local cluster, with the resource annotator on
and off, and reports where each kind of task ran and how long it took. Two workloads:

- ``toy`` (the default): pure-Python stand-ins, no dependency at all;
- ``md`` (``pip install 'hybrid[md]'``): real molecular dynamics. packmol packs boxes of
  water (CPU tasks), and OpenMM equilibrates each box (GPU tasks: the CUDA platform on a
  worker that was given a GPU, the CPU platform elsewhere, e.g. on a laptop).
"""

from __future__ import annotations

import contextlib
import io
import math
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
import warnings
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from distributed import as_completed, get_worker
from tqdm import tqdm

from hybrid.annotator import gpu_task
from hybrid.backends.local import DaskLocalCluster, NoGPUWarning
from hybrid.resources import ComputeResources


@gpu_task
def simulate(seed: int, steps: int = 20_000) -> dict[str, Any]:
    """A GPU-style task: a Langevin-like random walk of one particle in a harmonic well."""
    start = time.perf_counter()
    rng = random.Random(seed)
    x = v = energy = 0.0
    for _ in range(steps):
        v = 0.9 * v - 0.01 * x + 0.05 * rng.gauss(0.0, 1.0)
        x += v
        energy += 0.5 * x * x
    return _where(start, energy=energy / steps)


def pack_box(seed: int, molecules: int = 120, box: float = 10.0, radius: float = 0.6) -> dict:
    """A CPU task: place non-overlapping spheres in a cubic box by random sequential addition."""
    start = time.perf_counter()
    rng = random.Random(seed)
    placed: list[tuple[float, float, float]] = []
    tries = 0
    limit = (2 * radius) ** 2
    while len(placed) < molecules and tries < 200_000:
        tries += 1
        p = tuple(rng.uniform(radius, box - radius) for _ in range(3))
        if all(math.dist(p, q) ** 2 >= limit for q in placed):
            placed.append(p)
    return _where(start, placed=len(placed))


# --------------------------------------------------------------------------- md workload
#: One TIP3P water (HOH: OpenMM adds its bonds as a standard residue), packmol's template.
WATER_PDB = """\
HETATM    1  O   HOH A   1       0.000   0.000   0.000  1.00  0.00           O
HETATM    2  H1  HOH A   1       0.957   0.000   0.000  1.00  0.00           H
HETATM    3  H2  HOH A   1      -0.240   0.927   0.000  1.00  0.00           H
END
"""
#: Liquid water at 300 K: molecules per cubic nanometre.
WATERS_PER_NM3 = 33.4


def md_missing() -> str | None:
    """What the md workload lacks here (``None``: OpenMM and packmol are installed)."""
    try:
        import openmm  # noqa: F401
    except ImportError:
        return "OpenMM is not installed: pip install 'hybrid[md]'"
    if packmol_executable() is None:
        return "packmol is not installed: pip install 'hybrid[md]'"
    return None


def packmol_executable() -> str | None:
    """The ``packmol`` program (the ``packmol`` wheel puts it beside this python)."""
    beside = os.path.join(os.path.dirname(sys.executable), "packmol")
    return beside if os.access(beside, os.X_OK) else shutil.which("packmol")


def pack_water_box(seed: int, waters: int = 216) -> dict[str, Any]:
    """A CPU task: packmol packs ``waters`` water molecules into a cubic box at liquid
    density; returns the box as PDB text and its edge."""
    start = time.perf_counter()
    program = packmol_executable()
    if program is None:
        raise RuntimeError(md_missing())
    edge = 10 * (waters / WATERS_PER_NM3) ** (1 / 3)  # angstrom
    with tempfile.TemporaryDirectory(prefix="hybrid-md-") as tmp:
        with open(os.path.join(tmp, "water.pdb"), "w") as template:
            template.write(WATER_PDB)
        instructions = (f"tolerance 2.0\nfiletype pdb\nseed {seed + 1}\noutput box.pdb\n"
                        f"structure water.pdb\n  number {waters}\n"
                        f"  inside cube 1. 1. 1. {edge - 2:.3f}\nend structure\n")
        with open(os.path.join(tmp, "box.inp"), "w+") as script:
            script.write(instructions)
            script.seek(0)  # packmol reads its input more than once: a file, not a pipe
            run = subprocess.run([program], stdin=script, cwd=tmp, capture_output=True,
                                 text=True, timeout=600, check=False)
        box = os.path.join(tmp, "box.pdb")
        if not os.path.exists(box):
            raise RuntimeError(f"packmol failed (exit {run.returncode}): "
                               + " ".join((run.stdout + run.stderr).split()[-40:]))
        with open(box) as packed:
            pdb = packed.read()
    return _where(start, pdb=pdb, waters=waters, edge_nm=edge / 10, seed=seed)


def md_platform() -> Any:
    """OpenMM's CUDA platform where this worker was given a GPU, else its CPU platform."""
    import openmm

    if os.environ.get("CUDA_VISIBLE_DEVICES", "").strip() not in ("", "-1"):
        try:
            return openmm.Platform.getPlatformByName("CUDA")
        except Exception:  # no CUDA plugin or driver: the CPU platform still runs
            pass
    return openmm.Platform.getPlatformByName("CPU")


def prepare_box(box: dict[str, Any]) -> dict[str, Any]:
    """A CPU task: the OpenMM system of a packed box (TIP3P, PME, rigid water), serialised.

    It is the part of a simulation that needs no GPU (force field assignment: pure Python,
    seconds for big systems), split off so that CPU workers prepare the next simulations'
    inputs while the GPU runs the current ones (docs/annotator.md, "Feeding the GPU")."""
    import openmm
    from openmm import app, unit

    start = time.perf_counter()
    pdb = app.PDBFile(io.StringIO(box["pdb"]))
    edge = box["edge_nm"]
    pdb.topology.setUnitCellDimensions(openmm.Vec3(edge, edge, edge) * unit.nanometer)
    system = app.ForceField("tip3p.xml").createSystem(
        pdb.topology, nonbondedMethod=app.PME,
        nonbondedCutoff=min(0.9, edge / 2 - 0.01) * unit.nanometer, constraints=app.HBonds)
    return _where(start, system=openmm.XmlSerializer.serialize(system), pdb=box["pdb"],
                  edge_nm=edge, seed=box.get("seed", 0))


@gpu_task
def simulate_box(box: dict[str, Any], steps: int = 1000, seed: int | None = None,
                 start_at: float | None = None) -> dict[str, Any]:
    """A GPU task: OpenMM minimises and runs ``steps`` 2 fs Langevin steps of a water box at
    300 K (``box``: from :func:`prepare_box`, or a packed box, prepared here); returns the
    speed, the platform and when the steps ran (``time.time()``). ``start_at``: begin the
    steps no earlier than this ``time.time()`` (to measure several simulations at once)."""
    import openmm
    from openmm import app, unit

    start = time.perf_counter()
    if "system" not in box:
        box = {**box, **prepare_box(box)}
    pdb = app.PDBFile(io.StringIO(box["pdb"]))
    system = openmm.XmlSerializer.deserialize(box["system"])
    integrator = openmm.LangevinMiddleIntegrator(300 * unit.kelvin, 1 / unit.picosecond,
                                                 0.002 * unit.picoseconds)
    integrator.setRandomNumberSeed((box.get("seed", 0) if seed is None else seed) + 1)
    platform = md_platform()
    properties = {}
    if platform.getName() == "CPU":
        properties["Threads"] = str(max(1, get_worker().state.nthreads))
    context = openmm.Context(system, integrator, platform, properties)
    context.setPositions(pdb.positions)
    openmm.LocalEnergyMinimizer.minimize(context, 10.0, 100)
    if start_at is not None:
        time.sleep(max(0.0, start_at - time.time()))
    began, running = time.time(), time.perf_counter()
    integrator.step(steps)
    energy = context.getState(getEnergy=True).getPotentialEnergy()
    elapsed = time.perf_counter() - running
    return _where(start, platform=platform.getName(), steps=steps,
                  atoms=system.getNumParticles(), step_seconds=elapsed, began=began,
                  ended=began + elapsed, ns_per_day=steps * 0.002e-3 / elapsed * 86400,
                  potential_kj_per_mol=energy.value_in_unit(unit.kilojoule_per_mole))


def _where(start: float, **result: Any) -> dict[str, Any]:
    worker = get_worker()
    return {
        "worker": worker.name,
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "seconds": time.perf_counter() - start,
        **result,
    }


@dataclass
class RunReport:
    """Where each kind of task ran, and for how long, in one run of the workload."""

    annotated: bool
    wall_seconds: float = 0.0
    workers: dict[str, Counter] = field(default_factory=lambda: {"simulation": Counter(),
                                                                 "packing": Counter()})
    task_seconds: dict[str, float] = field(default_factory=lambda: {"simulation": 0.0,
                                                                    "packing": 0.0})
    #: md workload: the OpenMM platform of each simulation, and their speed (ns/day).
    platforms: Counter = field(default_factory=Counter)
    ns_per_day: list[float] = field(default_factory=list)
    #: md workload: (began, ended, ns simulated, worker, platform) of each simulation's steps.
    spans: list[tuple[float, float, float, str, str]] = field(default_factory=list)

    #: The run was cut off at its timeout (its makespan is a lower bound).
    timed_out: bool = False

    def aggregate_ns_per_day(self) -> float | None:
        """Simulated ns per day of the simulations together: their ns over the time at least
        one of them was stepping (``None`` without simulations)."""
        busy, end = 0.0, float("-inf")
        for began, ended, *_ in sorted(self.spans):
            busy += max(0.0, ended - max(began, end))
            end = max(end, ended)
        return sum(s[2] for s in self.spans) / busy * 86400 if busy > 0 else None

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        out = {
            "annotated": self.annotated,
            "wall_seconds": round(self.wall_seconds, 3),
            "workers": {kind: dict(counts) for kind, counts in self.workers.items()},
            "task_seconds": {k: round(v, 3) for k, v in self.task_seconds.items()},
        }
        if self.platforms:
            out["platforms"] = dict(self.platforms)
            out["ns_per_day"] = [round(v, 2) for v in self.ns_per_day]
        return out


#: ``submit(client, simulations, packings, sizes)`` -> {future: kind}, per workload.
Submitter = Callable[[Any, int, int, dict[str, int]], dict[Any, str]]


def _submit_toy(client: Any, simulations: int, packings: int,
                sizes: dict[str, int]) -> dict[Any, str]:
    futures = {}
    for i in range(simulations):
        futures[client.submit(simulate, i, pure=False)] = "simulation"
    for i in range(packings):
        futures[client.submit(pack_box, i, pure=False)] = "packing"
    return futures


def md_graph(simulations: int, packings: int, waters: int = 216, steps: int = 1000
             ) -> tuple[list[Any], list[Any], list[Any]]:
    """The md workload as ``dask.delayed`` tasks: ``packings`` boxes packed and prepared
    (CPU tasks), simulation ``i`` runs box ``i % packings`` (a GPU task). Computed as one
    graph, the annotator puts the packings and preparations the GPU waits for first."""
    import dask

    boxes = [dask.delayed(pack_water_box, pure=False)(i, waters) for i in range(packings)]
    prepared = [dask.delayed(prepare_box, pure=False)(box) for box in boxes]
    runs = [dask.delayed(simulate_box, pure=False)(prepared[i % packings], steps, i)
            for i in range(simulations)]
    return boxes, prepared, runs


def _submit_md(client: Any, simulations: int, packings: int,
               sizes: dict[str, int]) -> dict[Any, str]:
    boxes, prepared, runs = md_graph(simulations, packings, sizes.get("waters", 216),
                                     sizes.get("steps", 1000))
    futures = client.compute([*boxes, *prepared, *runs])
    kinds = ["packing"] * len(boxes) + ["preparation"] * len(prepared) + [
        "simulation"] * len(runs)
    return dict(zip(futures, kinds, strict=True))


WORKLOADS: dict[str, Submitter] = {"toy": _submit_toy, "md": _submit_md}


def run_workload(backend: Any, simulations: int, packings: int, annotated: bool,
                 progress: bool = True, workload: str = "toy",
                 sizes: dict[str, int] | None = None,
                 timeout: float | None = None) -> RunReport:
    """Submit the mixed workload through ``backend`` (a hybrid backend, or a client of a
    hybrid cluster) and collect a :class:`RunReport`; after ``timeout`` seconds the tasks
    left are cancelled and the report says so (``timed_out``)."""
    client = getattr(backend, "client", backend)
    report = RunReport(annotated=annotated)
    client.annotator.enabled = annotated
    start = time.perf_counter()
    futures = WORKLOADS[workload](client, simulations, packings, sizes or {})
    label = "annotated" if annotated else "not annotated"
    try:
        _collect(client, futures, report, label, progress, timeout)
    except TimeoutError:
        report.timed_out = True
        client.cancel(list(futures))
    report.wall_seconds = time.perf_counter() - start
    return report


def _collect(client: Any, futures: dict[Any, str], report: RunReport, label: str,
             progress: bool, timeout: float | None) -> None:
    with tqdm(total=len(futures), desc=f"demo ({label})", unit="task", disable=not progress,
              leave=False) as bar:
        for future in as_completed(futures, loop=client.loop, timeout=timeout):
            result = future.result()
            kind = futures[future]
            report.workers.setdefault(kind, Counter())[result["worker"]] += 1
            report.task_seconds[kind] = report.task_seconds.get(kind, 0.0) + result["seconds"]
            if "platform" in result:
                report.platforms[result["platform"]] += 1
                report.ns_per_day.append(result["ns_per_day"])
                report.spans.append((result["began"], result["ended"],
                                     result["steps"] * 0.002e-3, str(result["worker"]),
                                     result["platform"]))
            bar.update(1)


def format_report(report: RunReport) -> str:
    """Human-readable lines for one run."""
    title = "annotation ON " if report.annotated else "annotation OFF"
    lines = [f"{title}  (wall time {report.wall_seconds:.2f} s)"]
    for kind, counts in report.workers.items():
        where = ", ".join(f"{w}: {n}" for w, n in sorted(counts.items()))
        n = sum(counts.values())
        mean = report.task_seconds[kind] / n if n else 0.0
        lines.append(f"  {kind:<10} {n:>3} tasks, {mean:.3f} s each, ran on {where}")
    if report.platforms:
        platforms = ", ".join(f"{name}: {n}" for name, n in sorted(report.platforms.items()))
        speed = sum(report.ns_per_day) / len(report.ns_per_day)
        lines.append(f"  OpenMM platforms: {platforms}; mean {speed:.1f} ns/day")
    return "\n".join(lines)


def summary(reports: list[RunReport]) -> str:
    """What annotation changed: where each kind of task ran with it on and off."""
    by = {report.annotated: report for report in reports}
    if True not in by or False not in by:
        return ""
    on, off = by[True], by[False]

    def share(report: RunReport, kind: str, prefix: str) -> str:
        counts = report.workers[kind]
        total = sum(counts.values())
        inside = sum(n for worker, n in counts.items() if str(worker).startswith(prefix))
        return f"{inside}/{total}"

    return (
        "What annotation changed:\n"
        f"  simulations on GPU-pool workers: {share(on, 'simulation', 'gpu')} with annotation, "
        f"{share(off, 'simulation', 'gpu')} without\n"
        f"  packings on CPU-pool workers:    {share(on, 'packing', 'cpu')} with annotation, "
        f"{share(off, 'packing', 'cpu')} without\n"
        "  With annotation every simulation asks for the GPU resource and every packing for "
        "notGPU,\n  so each runs only where it belongs; without it any task runs on any "
        "worker."
    )


def run_demo(gpu_workers: int = 2, cpu_workers: int = 2, simulations: int = 12,
             packings: int = 12, progress: bool = True, workload: str = "toy",
             sizes: dict[str, int] | None = None, cpu_threads: int = 1) -> list[RunReport]:
    """Start the local pools, run the workload with annotation on and off, stop everything.

    ``workload``: ``"toy"`` or ``"md"`` (``sizes``: ``waters`` per box, ``steps`` per
    simulation); ``cpu_threads``: threads of each CPU-pool worker.
    """
    if workload not in WORKLOADS:
        raise ValueError(f"workload must be one of {sorted(WORKLOADS)}, not {workload!r}")
    if workload == "md" and (missing := md_missing()):
        raise RuntimeError(missing)
    if workload == "md" and simulations and not packings:
        raise ValueError("the md workload simulates packed boxes: give at least one packing")
    with local_pools(gpu_workers, cpu_workers, cpu_threads) as backend:
        return [
            run_workload(backend, simulations, packings, annotated, progress, workload, sizes)
            for annotated in (True, False)
        ]


@contextlib.contextmanager
def local_pools(gpu_workers: int, cpu_workers: int,
                cpu_threads: int = 1) -> Iterator[DaskLocalCluster]:
    """A local GPU pool and CPU pool, every worker connected; stopped on exit."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NoGPUWarning)
        backend = DaskLocalCluster(
            number_of_workers=gpu_workers,
            resources_per_worker=ComputeResources(number_of_threads=1, number_of_gpus=1),
            pools={"cpu": (cpu_workers, ComputeResources(number_of_threads=cpu_threads))},
            # workers racing the scheduler's shutdown log harmless connection errors; task
            # failures still reach the demo through their futures
            silence_logs="critical",
        )
        with backend:
            backend.client.wait_for_workers(gpu_workers + cpu_workers, timeout=120)
            yield backend
