"""GPU sharing: how many GPU tasks run at once on one GPU, and CUDA MPS.

Tasks that each keep a GPU only partly busy (small molecular systems, seed 000's "two
protocols per worker") finish sooner together, but only under NVIDIA's Multi-Process Service
(MPS): without it the GPU time-slices between them, and k tasks together ran SLOWER than one
alone (one H100, 3000 waters: 938 ns/day alone, 654, 601, 600 ns/day in all for k = 2, 4, 8
time-sliced; under MPS 1647, 2765, 3723 ns/day; docs/benchmarks.md). So a GPU pool's job:

- starts one MPS control daemon of its own before its workers when the node has
  ``nvidia-cuda-mps-control`` (``gpu_mps="auto"``; ``"on"`` makes a missing one an error,
  ``"off"`` never starts one), its pipe and log directories private to the job, and stops it
  after the workers;
- runs :data:`MPS_TASKS_PER_GPU` GPU tasks at once per GPU under that daemon, and one per GPU
  without it, unless the pool's ``gpu_sharing`` says how many (then as many either way);
- as worker processes (``gpu_sharing_mode="processes"``: ``gpus x k`` one-thread workers
  under a nanny) or as threads of one worker (``"threads"``: ``gpus x k`` threads, one task
  per thread); ``"auto"`` (the default) takes processes wherever a nanny can run and the
  job's memory gives each at least 1 GiB (eight processes ran 3488 ns/day in all on an H100,
  eight threads of one process 3142).

Which count applies is known only on the execute node, so a job carries both worker command
lines (:func:`variants`) and picks one after trying to start the daemon. A GPU worker
advertises ``GPU=<its task slots>``: a GPU task asks for a share of at most 1
(``hybrid.annotator.gpu-fraction``), so it is the worker's threads that bound how many run
at once. A GPU pool that also serves CPU tasks (``serves_unannotated``) keeps at least
``cores`` threads per job for them, and its GPU tasks may then run up to ``1/fraction`` per
slot.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from typing import Protocol

from hybrid.routing import GPU, NOT_GPU


class PoolSpec(Protocol):
    """What this module reads of a :class:`hybrid.pools.PoolSpec` (which imports this
    module: the model sits a floor above)."""

    gpus: int
    cores: int
    processes: int
    memory: int | None
    nanny: bool | None
    gpu_sharing: int | None
    gpu_sharing_mode: str
    gpu_mps: str

    @property
    def threads_per_worker(self) -> int: ...

    @property
    def memory_per_worker(self) -> int | None: ...

    @property
    def serves_cpu_tasks(self) -> bool: ...

__all__ = ["MPS_TASKS_PER_GPU", "Layout", "detect_gpus", "layout", "mps_status", "pod_command",
           "sharing_mode", "starts_mps", "variants"]

#: GPU tasks per GPU under an MPS daemon when the pool does not say (``gpu_sharing=None``):
#: 8 gave 4.0x the throughput of one task alone on an H100 (4: 2.9x; docs/benchmarks.md).
MPS_TASKS_PER_GPU = 8

#: The program that controls an MPS daemon (part of the NVIDIA driver's utilities).
MPS_CONTROL = "nvidia-cuda-mps-control"


@dataclass(frozen=True)
class Layout:
    """The worker processes of one job and what each one advertises."""

    #: Worker processes of the job (``--nworkers``).
    processes: int
    #: Threads of each worker process (``--nthreads``).
    threads: int
    #: What each worker advertises (``--resources``).
    resources: dict[str, float]
    #: Memory limit of each worker process in bytes (``None``: none).
    memory: int | None
    #: GPU tasks one GPU runs at once (0 for a CPU pool).
    tasks_per_gpu: int = 0


#: The least memory per worker process for which ``gpu_sharing_mode="auto"`` takes processes.
MEMORY_PER_PROCESS = 2**30


def sharing_mode(spec: PoolSpec, nanny_possible: bool = True) -> str:
    """``"processes"`` or ``"threads"``: the pool's ``gpu_sharing_mode``, ``auto`` resolved:
    processes where a nanny can run (not ``nanny=False``, not ``processes > 1``, not behind
    a gateway's proxy: ``nanny_possible=False``) and the job's memory leaves each process at
    least :data:`MEMORY_PER_PROCESS` (or no memory is given); threads otherwise."""
    if spec.gpu_sharing_mode != "auto":
        return spec.gpu_sharing_mode
    most = spec.gpus * max(variants(spec))
    enough = spec.memory is None or spec.memory // most >= MEMORY_PER_PROCESS
    if nanny_possible and spec.nanny is not False and spec.processes == 1 and enough:
        return "processes"
    return "threads"


def layout(spec: PoolSpec, tasks_per_gpu: int | None = None,
           nanny_possible: bool = True) -> Layout:
    """The job's workers when each GPU runs ``tasks_per_gpu`` tasks at once (default: the
    count without an MPS daemon); ``nanny_possible``: whether a nanny can run (not behind
    a gateway's proxy). CPU pools: ``processes`` workers of ``cores/processes`` threads, as
    always."""
    if not spec.gpus:
        return Layout(spec.processes, spec.threads_per_worker,
                      {GPU: 0, NOT_GPU: spec.threads_per_worker}, spec.memory_per_worker)
    k = tasks_per_gpu if tasks_per_gpu is not None else variants(spec)[0]
    slots = spec.gpus * k
    if sharing_mode(spec, nanny_possible) == "processes":
        processes, per_process = slots, 1
    else:
        processes = spec.processes
        per_process = max(1, slots // processes)
    threads = per_process
    if spec.serves_cpu_tasks:
        threads = max(per_process, spec.cores // processes)
    resources = {GPU: per_process, NOT_GPU: threads if spec.serves_cpu_tasks else 0}
    memory = spec.memory // processes if spec.memory else None
    return Layout(processes, threads, resources, memory, k)


def variants(spec: PoolSpec) -> tuple[int, int]:
    """GPU tasks per GPU ``(without an MPS daemon, under one)`` for a GPU pool."""
    if spec.gpu_sharing is not None:
        return spec.gpu_sharing, spec.gpu_sharing
    if spec.gpu_mps == "off":
        return 1, 1
    if spec.gpu_mps == "on":
        return MPS_TASKS_PER_GPU, MPS_TASKS_PER_GPU
    return 1, MPS_TASKS_PER_GPU


def starts_mps(spec: PoolSpec) -> str | None:
    """``"auto"`` or ``"on"`` when the pool's jobs start an MPS daemon, else ``None``."""
    return spec.gpu_mps if spec.gpus and spec.gpu_mps != "off" else None


def detect_gpus() -> list[str]:
    """Visible GPU device ids: ``CUDA_VISIBLE_DEVICES`` if set, else ``nvidia-smi``'s list."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return [d.strip() for d in visible.split(",") if d.strip() and d.strip() != "-1"]
    if shutil.which("nvidia-smi") is None:
        return []
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=index", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=20, check=True,
        ).stdout
    except (subprocess.SubprocessError, OSError):
        return []
    return [line.strip() for line in out.splitlines() if line.strip()]


def mps_status(timeout: float = 10.0) -> tuple[bool, str]:
    """Whether this node can run CUDA MPS: ``(found, what was seen)`` (``hybrid doctor``)."""
    program = shutil.which(MPS_CONTROL)
    if program is None:
        return False, f"{MPS_CONTROL} is not on PATH"
    seen = f"{program}"
    smi = shutil.which("nvidia-smi")
    if smi is not None:
        try:
            out = subprocess.run([smi, "--query-gpu=name,compute_mode", "--format=csv,noheader"],
                                 capture_output=True, text=True, timeout=timeout, check=False)
            gpus = [line.strip() for line in out.stdout.splitlines() if line.strip()]
            if gpus:
                seen += "; GPUs: " + "; ".join(gpus)
        except (OSError, subprocess.SubprocessError):
            pass
    return True, seen


#: The rest of what a GPU pod runs after the MPS block (``/bin/sh -c SCRIPT hybrid-worker N
#: ARGV... ARGV_MPS...``): the first ``N`` words are the worker's command line without an
#: MPS daemon, the rest the one under it. The argv is never parsed by a shell.
_POD_TAIL = r"""hybrid_i=0
for hybrid_word do
    shift
    hybrid_i=$((hybrid_i + 1))
    if [ "$hybrid_i" -le "$hybrid_n" ]; then
        [ -z "$hybrid_mps" ] && set -- "$@" "$hybrid_word"
    else
        [ -n "$hybrid_mps" ] && set -- "$@" "$hybrid_word"
    fi
done
hybrid_worker=
trap 'kill -KILL $hybrid_worker 2>/dev/null; hybrid_mps_stop; exit 143' TERM INT
"$@" &
hybrid_worker=$!
wait "$hybrid_worker"
hybrid_status=$?
hybrid_mps_stop
exit "$hybrid_status"
"""


def pod_command(spec: PoolSpec, plain: list[str], shared: list[str]) -> list[str]:
    """A GPU pod's command: the MPS block of the job scripts, then the worker command line
    ``plain`` without a daemon or ``shared`` under one (``sh -c``, argv as data)."""
    from hybrid.templates import render

    script = 'hybrid_n=$1; shift\n' + render("gpu-mps.sh.j2", mps=starts_mps(spec)) + _POD_TAIL
    return ["/bin/sh", "-c", script, "hybrid-worker", str(len(plain)), *plain, *shared]
