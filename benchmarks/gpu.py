"""P5 and issue 26: a real OpenMM + packmol mix on one GPU, annotated or not, shared or not.

The workload is ``hybrid demo --workload md`` as one graph: packmol packs water boxes and
OpenMM prepares their systems (CPU tasks), OpenMM simulates them (GPU tasks: the CUDA
platform on a worker given the GPU, the CPU platform on a CPU worker). One
:class:`~hybrid.HybridCluster` on this machine: a ``local`` CPU pool and, one after the other,
``local`` GPU pools of one job (one GPU) with each sharing setting, so the job script, its
CUDA MPS daemon and the worker command are the ones every batch system runs.

Phases, most important first, each within what is left of ``budget`` seconds (a phase that
does not fit is skipped, saying so; the unannotated run is cut off at the budget and then
gives a lower bound):

1. one simulation alone on the GPU (no sharing, no MPS): the reference ns/day;
2. the workload annotated at its full size with the default sharing, without sharing, and
   time-sliced two per GPU (the demo's old default: two GPU workers on one GPU);
3. the sharing sweep: k simulations of one box at once, in all ns/day, per setting;
4. the workload at ``baseline_steps``, annotated with the default sharing and not annotated.

Each workload run reports its makespan, the GPU's busy fraction (NVML, every 0.1 s: the share
of time a kernel ran, not throughput), the simulations' ns/day together (their simulated ns
over the time from the first one's steps to the last one's end) and where each ran.
``--md-on-cpu`` (no GPU here) runs the same code on OpenMM's CPU platform, with no verdict.
"""

from __future__ import annotations

import json
import os
import threading
import time
from typing import Any

from benchmarks.harness import Results, log

#: (label, pool options) of the sharing settings; the first is the default.
SETTINGS: dict[str, dict[str, Any]] = {
    "default": {},
    "MPS x16": {"gpu_sharing": 16, "gpu_mps": "on"},
    "no sharing": {"gpu_sharing": 1, "gpu_mps": "off"},
    "time-sliced x2": {"gpu_sharing": 2, "gpu_mps": "off", "gpu_sharing_mode": "threads"},
}
#: The sweep: (label, options, needs MPS, which k), k simulations of one box at once. Beside
#: the MPS counts: time-sliced throughput is flat past 2 (issue 26), processes vs threads.
SWEEP: list[tuple[str, dict[str, Any], bool, str]] = [
    ("time-sliced", {"gpu_mps": "off", "gpu_sharing_mode": "threads"}, False, "small"),
    ("MPS processes", {"gpu_mps": "on", "gpu_sharing_mode": "processes"}, True, "all"),
    ("MPS threads", {"gpu_mps": "on", "gpu_sharing_mode": "threads"}, True, "default"),
]


def nvml_gpus() -> tuple[int, str]:
    """(number of NVIDIA GPUs NVML sees, why none) ."""
    try:
        import pynvml
    except ImportError:
        return 0, "the NVML bindings are missing (pip install nvidia-ml-py)"
    try:
        pynvml.nvmlInit()
    except Exception as error:
        return 0, f"NVML found no NVIDIA driver or GPU ({error})"
    try:
        return pynvml.nvmlDeviceGetCount(), "NVML lists no GPU"
    finally:
        pynvml.nvmlShutdown()


def gpu_description() -> dict[str, Any]:
    """The GPU's name, memory, driver and compute mode, as NVML says (empty without)."""
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:
        return {}
    try:
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        name = pynvml.nvmlDeviceGetName(handle)
        return {"name": name.decode() if isinstance(name, bytes) else name,
                "memory_gib": round(pynvml.nvmlDeviceGetMemoryInfo(handle).total / 2**30, 1),
                "driver": str(pynvml.nvmlSystemGetDriverVersion()),
                "compute_mode": int(pynvml.nvmlDeviceGetComputeMode(handle))}
    finally:
        pynvml.nvmlShutdown()


class BusySampler:
    """Samples GPU 0's utilisation every ``interval`` seconds in a thread (no-op without)."""

    def __init__(self, enabled: bool, interval: float = 0.1):
        self.enabled = enabled
        self.interval = interval
        self.samples: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        import pynvml

        pynvml.nvmlInit()
        try:
            handle = pynvml.nvmlDeviceGetHandleByIndex(0)
            while not self._stop.wait(self.interval):
                self.samples.append(pynvml.nvmlDeviceGetUtilizationRates(handle).gpu / 100)
        finally:
            pynvml.nvmlShutdown()

    def __enter__(self) -> BusySampler:
        if self.enabled:
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self.enabled:
            self._thread.join(10)

    @property
    def busy(self) -> float | None:
        """The mean utilisation in %, or ``None``."""
        return 100 * sum(self.samples) / len(self.samples) if self.samples else None


class Bench:
    """One run: the cluster, the budget, the results, and the raw record (JSON)."""

    def __init__(self, results: Results, budget: float, raw_path: str | None, gpus: int,
                 system: str, config: str):
        self.results = results
        self.deadline = time.monotonic() + budget
        self.raw_path = raw_path
        self.gpus = gpus
        self.system = system
        self.config = config
        self.raw: dict[str, Any] = {"gpu": gpu_description(), "phases": [], "skipped": []}
        self.cluster: Any = None
        self.client: Any = None
        self.pool: str | None = None

    def left(self) -> float:
        """Seconds of the budget left."""
        return self.deadline - time.monotonic()

    def save(self) -> None:
        """Write the raw record now (a run cut short still leaves what it measured)."""
        if self.raw_path:
            with open(self.raw_path, "w") as out:
                json.dump(self.raw, out, indent=1, default=str)

    def skip(self, what: str, why: str) -> None:
        """A phase that did not run."""
        log(f"gpu-md: skipped {what}: {why}")
        self.raw["skipped"].append({"what": what, "why": why})
        self.save()

    def record(self, variant: str, value: float | None, unit: str,
               config: str | None = None) -> None:
        """One sample of a measure (``None``: not measured, nothing recorded)."""
        if value is None:
            return
        measure = self.results.measure("gpu-md", self.system, config or self.config, variant,
                                       unit=unit)
        measure.samples.append(float(value))
        log(f"gpu-md: {variant}: {value:.4g} {unit}")

    # ------------------------------------------------------------------ pools
    def use_gpu_pool(self, label: str, options: dict[str, Any]) -> int:
        """Scale the previous GPU pool to 0 and one job of this setting up; its task slots."""
        from hybrid.gpusharing import mps_status, variants

        name = "gpu-" + "".join(c if c.isalnum() else "-" for c in label.lower())
        if self.pool is not None and self.pool != name:
            self.cluster.scale(0, pool=self.pool)
            # the job, and with it its MPS daemon, must be gone: two daemons must not share
            # a GPU
            wait(lambda: not self.cluster.jobs(self.pool), 120,
                 f"the job of {self.pool} to end")
            self.raw.setdefault("after", {})[self.pool] = {"logs": mps_logs(),
                                                           "mps": mps_processes()}
        if name not in self.cluster.pools:
            self.cluster.add_pool(name, "local", gpus=1, cores=1, env=passed_environment(),
                                  **options)
        spec = self.cluster.pools[name].spec
        plain, shared = variants(spec)
        mps = spec.gpu_mps == "on" or (spec.gpu_mps == "auto" and mps_status()[0])
        slots = shared if mps else plain
        self.cluster.scale(1, pool=name)
        self.pool = name
        wait(lambda: self.slots(name) >= slots, 180, f"{slots} GPU task slots in {name}")
        return slots

    def slots(self, pool: str) -> float:
        """GPU task slots of the connected workers of ``pool``."""
        prefix = f"{self.cluster.name}-{pool}-"
        workers = self.client.sync(self.client.scheduler.identity, n_workers=-1)["workers"].values()
        return sum(w.get("resources", {}).get("GPU", 0) for w in workers
                   if str(w.get("name", "")).startswith(prefix))


def passed_environment() -> dict[str, str]:
    """What the local jobs need from this process's environment besides what every local job
    gets: where the packages are (the GPU machines: wheels unpacked under a ``--target``)
    and the CUDA libraries OpenMM's plugin loads."""
    return {name: os.environ[name] for name in ("PYTHONPATH", "LD_LIBRARY_PATH",
                                                "OPENMM_PLUGIN_DIR") if name in os.environ}


def wait(condition: Any, timeout: float, what: str) -> None:
    """Poll ``condition`` every 0.2 s until it holds, or fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"waited {timeout:g} s for {what}")
        time.sleep(0.2)


def run(results: Results, repeats: int, simulations: int = 16, packings: int = 8,
        waters: int = 3000, steps: int = 10_000, cpu_workers: int = 4, cpu_threads: int = 3,
        baseline_steps: int = 2000, sweep: tuple[int, ...] = (2, 4, 8, 16),
        budget: float = 480, settings: tuple[str, ...] = tuple(SETTINGS),
        raw_path: str | None = None, allow_cpu: bool = False) -> None:
    """Every phase within ``budget`` seconds (see the module's docstring); ``repeats``: runs
    of the default setting's workload (the others run once); ``settings``: the sharing
    settings (:data:`SETTINGS`) whose full-size workload runs; ``sweep``: the k of the
    sharing sweep (empty: no sweep)."""
    if steps < 1 or any(k < 1 for k in sweep):
        raise ValueError(f"steps ({steps}) and the sweep's k ({list(sweep)}) must be >= 1")
    unknown = sorted(set(settings) - set(SETTINGS))
    if unknown:
        raise ValueError(f"settings: {unknown} are not sharing settings of the GPU "
                         f"benchmark; choose from {sorted(SETTINGS)}")
    from hybrid import HybridCluster
    from hybrid.demo import md_missing, prepare_box

    gpus, why = nvml_gpus()
    if not gpus and not allow_cpu:
        results.skip("gpu-md", f"no NVIDIA GPU here: {why}. P5 runs where a GPU is lent")
        return
    if missing := md_missing():
        results.skip("gpu-md", missing)
        return
    system = "local GPU" if gpus else "local CPU only"
    config = f"{simulations} sims x {steps} steps, {packings} boxes x {waters} waters"
    bench = Bench(results, budget, raw_path or os.environ.get("HYBRID_GPU_BENCH_JSON"), gpus,
                  system, config)
    bench.raw["sizes"] = {"simulations": simulations, "packings": packings, "waters": waters,
                          "steps": steps, "baseline_steps": baseline_steps,
                          "cpu_workers": cpu_workers, "cpu_threads": cpu_threads,
                          "sweep": list(sweep), "budget": budget,
                          "settings": list(settings)}
    from hybrid.gpusharing import mps_status

    bench.raw["mps"] = mps_status()
    with HybridCluster(name="gpubench", silence_logs="error") as cluster:
        bench.cluster = cluster
        bench.client = client = cluster.get_client()
        cluster.add_pool("cpu", "local", cores=cpu_threads, nanny=False,
                         env=passed_environment())
        cluster.scale(cpu_workers, pool="cpu")
        cluster.wait_for_workers(cpu_workers, timeout=180, pool="cpu", progress=False)
        log("gpu-md: warm-up (imports, the CUDA kernels' compilation)")
        bench.use_gpu_pool("no sharing", SETTINGS["no sharing"])
        small = client.compute(_box(min(waters, 500)))
        warm = client.submit(_simulate(), small, 200, 0, pure=False)
        warm.result(timeout=300)
        box = client.submit(prepare_box, client.compute(_box(waters)), pure=False)
        box.result(timeout=300)

        # 1. one simulation alone, three times: the reference
        for seed in (1, 2, 3):
            alone = client.submit(_simulate(), box, steps, seed, pure=False).result(600)
            bench.record("one simulation alone: ns/day", alone["ns_per_day"], "ns/day")
            bench.raw["phases"].append({"phase": "alone", "result": _brief(alone)})
        bench.save()

        # 2. the workload at full size, annotated, per setting
        sizes = {"waters": waters, "steps": steps}
        plan = [("default", r) for r in range(repeats)] + [
            ("no sharing", 0), ("time-sliced x2", 0)]
        if bench.raw["mps"][0]:
            plan.append(("MPS x16", 0))
        plan = [(label, r) for label, r in plan if label in settings]
        plan.sort(key=lambda item: item[1])  # every setting once before any repetition
        for label, _repetition in plan:
            needed = 20 if label == "default" else 60
            if bench.left() < needed:
                bench.skip(f"annotated, {label}: makespan", f"{bench.left():.0f} s of the "
                           "budget left")
                continue
            bench.use_gpu_pool(label, SETTINGS[label])
            workload(bench, f"annotated, {label}", True, simulations, packings, sizes)

        # 3. the sharing sweep
        for label, options, needs_mps, which in SWEEP:
            if needs_mps and not bench.raw["mps"][0]:
                bench.skip(f"{label}: ns/day", "no CUDA MPS here (nvidia-cuda-mps-control "
                           "is not on PATH)")
                continue
            counts = {"all": sweep, "small": sweep[:2], "default": (8,)}[which]
            for k in counts:
                if bench.left() < 40:
                    bench.skip(f"{label}, {k} at once: ns/day", "budget spent")
                    continue
                bench.use_gpu_pool(f"{label} {k}", {**options, "gpu_sharing": k})
                together(bench, label, k, box, steps)

        # 4. annotated vs not at baseline_steps (the unannotated run is slow: CPU platform)
        small_sizes = {"waters": waters, "steps": baseline_steps}
        small_config = (f"{simulations} sims x {baseline_steps} steps, {packings} boxes x "
                        f"{waters} waters")
        bench.use_gpu_pool("default", SETTINGS["default"])
        workload(bench, "annotated, default", True, simulations, packings, small_sizes,
                 small_config)
        if bench.left() < 30:
            bench.skip("not annotated: makespan", "budget spent")
        else:
            workload(bench, "not annotated", False, simulations, packings, small_sizes,
                     small_config, timeout=bench.left() - 10)
        cluster.scale(0, pool=bench.pool)
        wait(lambda: not cluster.jobs(bench.pool), 120, "the last GPU job to end")
        bench.raw.setdefault("after", {})[bench.pool] = {"logs": mps_logs(),
                                                         "mps": mps_processes()}
    bench.raw["mps_processes_after"] = mps_processes()
    bench.save()


def mps_logs() -> dict[str, Any]:
    """What the running jobs' MPS directories hold, and what the GPU jobs said (the
    benchmark's own record)."""
    import glob

    found: dict[str, Any] = {}
    for log_path in glob.glob(os.path.expanduser("~/.cache/hybrid/jobs/gpubench-gpu-*/"
                                                 "worker-*.log")):
        with open(log_path, errors="replace") as text:
            said = [line.strip() for line in text if line.startswith("hybrid:")]
        found[log_path] = said[-6:]
    for directory in glob.glob("/tmp/hybrid-mps.*"):
        entry: dict[str, Any] = {}
        for part in ("pipe", "log"):
            path = os.path.join(directory, part)
            entry[part] = sorted(os.listdir(path)) if os.path.isdir(path) else None
        log_file = os.path.join(directory, "log", "control.log")
        if os.path.exists(log_file):
            with open(log_file, errors="replace") as text:
                entry["control.log"] = text.read()[-1500:]
        found[directory] = entry
    return found


def mps_processes() -> list[dict[str, Any]]:
    """MPS processes still running (read only: what a job left behind)."""
    import psutil

    left = []
    for process in psutil.process_iter(["pid", "name", "cmdline", "create_time", "ppid"]):
        if "mps" in (process.info["name"] or ""):
            info = dict(process.info)
            try:
                info["pipe"] = process.environ().get("CUDA_MPS_PIPE_DIRECTORY")
            except psutil.Error:
                pass
            info["age_s"] = round(time.time() - info.pop("create_time"), 1)
            left.append(info)
    return left


def _box(waters: int) -> Any:
    import dask

    from hybrid.demo import pack_water_box

    return dask.delayed(pack_water_box, pure=False)(0, waters)


def _simulate() -> Any:
    from hybrid.demo import simulate_box

    return simulate_box


def _brief(result: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in result.items() if k not in ("pdb", "system")}


def workload(bench: Bench, variant: str, annotated: bool, simulations: int, packings: int,
             sizes: dict[str, int], config: str | None = None,
             timeout: float | None = None) -> None:
    """One run of the md workload: makespan, GPU busy, ns/day together, where each ran."""
    from hybrid.demo import run_workload

    log(f"gpu-md: {variant} ({config or bench.config})")
    with BusySampler(bool(bench.gpus)) as sampler:
        report = run_workload(bench.client, simulations, packings, annotated, False, "md",
                              sizes, timeout=timeout)
    cut = report.timed_out
    bench.record(f"{variant}: makespan" + (" (cut off: at least)" if cut else ""),
                 report.wall_seconds, "s", config)
    bench.record(f"{variant}: GPU busy", sampler.busy, "%", config)
    if not cut:
        bench.record(f"{variant}: ns/day together", report.aggregate_ns_per_day(), "ns/day",
                     config)
    bench.record(f"{variant}: simulations on CUDA", report.platforms.get("CUDA", 0), "of "
                 f"{len(report.spans)}", config)
    bench.raw["phases"].append({
        "phase": variant, "config": config or bench.config, "pool": bench.pool,
        "makespan_s": report.wall_seconds, "cut_off": cut, "gpu_busy_pct": sampler.busy,
        "ns_per_day_together": report.aggregate_ns_per_day(),
        "platforms": dict(report.platforms),
        "workers": {k: dict(v) for k, v in report.workers.items()},
        "simulations": [{"began": s[0], "ended": s[1], "worker": s[3], "platform": s[4]}
                        for s in report.spans],
        "ns_per_day_each": report.ns_per_day})
    bench.save()


def together(bench: Bench, label: str, k: int, box: Any, steps: int) -> None:
    """``k`` simulations of one box at once on the GPU pool, their steps started together
    (after every one has set up): their ns/day together."""
    from hybrid.demo import RunReport

    start_at = time.time() + 4 + 0.4 * k
    futures = [bench.client.submit(_simulate(), box, steps, 100 + i, start_at, pure=False)
               for i in range(k)]
    with BusySampler(bool(bench.gpus)) as sampler:
        results = bench.client.gather(futures)
    report = RunReport(annotated=True)
    for r in results:
        report.spans.append((r["began"], r["ended"], r["steps"] * 0.002e-3, str(r["worker"]),
                             r["platform"]))
    variant = f"{label}, {k} at once: ns/day"
    bench.record(variant, report.aggregate_ns_per_day(), "ns/day")
    bench.raw["phases"].append({
        "phase": variant, "pool": bench.pool, "gpu_busy_pct": sampler.busy,
        "ns_per_day_together": report.aggregate_ns_per_day(),
        "ns_per_day_each": [r["ns_per_day"] for r in results],
        "late_s": [round(r["began"] - start_at, 3) for r in results],
        "platforms": [r["platform"] for r in results],
        "workers": [str(r["worker"]) for r in results]})
    bench.save()
