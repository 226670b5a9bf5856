"""P5: a real mixed workload on a local GPU pool + CPU pool, annotated vs not.

The workload is ``hybrid demo --workload md``: packmol packs water boxes (CPU tasks) and
OpenMM simulates each box (GPU tasks; the CUDA platform on a worker that was given the GPU,
the CPU platform on a CPU worker). Both runs use the same cluster, interleaved. Measured:
the makespan, and the GPU's busy fraction over it, sampled from NVML every 0.1 s (the mean
of ``nvmlDeviceGetUtilizationRates().gpu``: the share of time a kernel was running).

Where NVML finds no GPU this benchmark is skipped, saying so; ``allow_cpu`` (the test suite's
quick configuration) runs the same code on the CPU platform, without a busy fraction.
"""

from __future__ import annotations

import threading
from typing import Any

from benchmarks.harness import Results, log, repeat, rotated


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


class BusySampler:
    """Samples GPU 0's utilisation every ``interval`` seconds in a thread."""

    def __init__(self, interval: float = 0.1):
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
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    @property
    def busy(self) -> float:
        """The mean utilisation, 0..1."""
        return sum(self.samples) / len(self.samples) if self.samples else float("nan")


def run(results: Results, repeats: int, simulations: int = 16, packings: int = 8,
        waters: int = 3000, steps: int = 10_000, gpu_workers: int = 2, cpu_workers: int = 4,
        cpu_threads: int = 3, allow_cpu: bool = False) -> None:
    """Annotated and not, ``repeats`` times each, interleaved, on one local cluster."""
    from hybrid.demo import local_pools, md_missing, run_workload

    gpus, why = nvml_gpus()
    if not gpus and not allow_cpu:
        results.skip("gpu-md", f"no NVIDIA GPU here: {why}. P5 runs where a GPU is lent")
        return
    if missing := md_missing():
        results.skip("gpu-md", missing)
        return
    system = "local GPU" if gpus else "local CPU only"
    config = (f"{simulations} sims x {steps} steps, {packings} boxes x {waters} waters, "
              f"{gpu_workers} GPU + {cpu_workers}x{cpu_threads} CPU workers")
    sizes = {"waters": waters, "steps": steps}
    with local_pools(gpu_workers, cpu_workers, cpu_threads) as backend:
        log("gpu-md: warm-up (kernel compilation, imports)")
        run_workload(backend, gpu_workers, 1, True, False, "md",
                     {"waters": min(waters, 500), "steps": 100})
        for repetition in range(repeats):
            log(f"gpu-md: repetition {repetition + 1} of {repeats}")
            for annotated in rotated([True, False], repetition):
                variant = "annotated" if annotated else "not annotated"
                busy = results.measure("gpu-md", system, config, f"{variant}: GPU busy",
                                       unit="%")

                def once(on: bool = annotated, busy_measure: Any = busy) -> dict[str, float]:
                    if gpus:
                        with BusySampler() as sampler:
                            report = run_workload(backend, simulations, packings, on, False,
                                                  "md", sizes)
                        busy_measure.samples.append(100 * sampler.busy)
                    else:
                        report = run_workload(backend, simulations, packings, on, False, "md",
                                              sizes)
                    on_gpu = report.platforms.get("CUDA", 0)
                    return {"value": report.wall_seconds, "simulations_on_cuda": on_gpu}

                repeat(results.measure("gpu-md", system, config, f"{variant}: makespan"),
                       once)
    if not gpus:
        results.measures = [m for m in results.measures if not m.variant.endswith("GPU busy")]
