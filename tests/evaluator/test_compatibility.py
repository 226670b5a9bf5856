"""What openff-evaluator's users rely on beyond its own tests (issue 24).

Its positional constructors mean what they mean there; where its batch tool is missing a
backend starts, warns once and fails its pool at the first submission; what openff-evaluator
refuses is refused with a ValueError that says the fix; openff-units quantities (their own
registry, vendored unchanged) are taken wherever hybrid takes a quantity, and reach every
backend's rendered job.
"""

from __future__ import annotations

import pickle
import warnings
from pathlib import Path

import dask
import numpy as np
import pytest
from distributed.deploy import Adaptive
from openff.units import unit as openff_unit

from hybrid.adaptive import PoolAdaptive
from hybrid.backends import (
    BaseDaskJobQueueBackend,
    BatchToolMissingWarning,
    DaskHTCondorBackend,
    DaskLSFBackend,
    DaskPBSBackend,
    DaskSLURMBackend,
)
from hybrid.backends.kubernetes import (
    DaskKubernetesBackend,
    DaskKubernetesExistingBackend,
    KubernetesEmptyDirVolume,
    KubernetesSecret,
)
from hybrid.errors import ConfigurationError, PoolFailed
from hybrid.pools import PoolSpec
from hybrid.resources import ComputeResources, GPUToolkit, PodResources, QueueWorkerResources
from hybrid.units import unit

pytestmark = pytest.mark.timeout(240)

SCRATCH = [KubernetesEmptyDirVolume(name="evaluator-storage", mount_path="/evaluator-storage")]
#: openff-evaluator's test fixtures' resources (tests/evaluator/upstream/test_backends).
NODE_AFFINITY = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
    "nodeSelectorTerms": [{"matchExpressions": [
        {"key": "nvidia.com/cuda.runtime.major", "operator": "In", "values": ["12"]},
        {"key": "nvidia.com/cuda.runtime.minor", "operator": "In", "values": ["4"]}]}]}}}


def evaluator_gpu_pods() -> PodResources:
    return PodResources(number_of_threads=1, number_of_gpus=1,
                        affinity_specification=NODE_AFFINITY, minimum_number_of_workers=1,
                        maximum_number_of_workers=1)


def evaluator_cpu_pods() -> PodResources:
    return PodResources(number_of_threads=1, number_of_gpus=0,
                        memory_limit=5 * openff_unit.terabyte,
                        ephemeral_storage_limit=20.0 * openff_unit.megabyte,
                        affinity_specification=None, minimum_number_of_workers=1,
                        maximum_number_of_workers=1)


class CountingAdaptive(PoolAdaptive):
    """A pool's adaptive scaler of the user's own: counts its steps."""

    adapted = 0

    async def adapt(self) -> None:
        type(self).adapted += 1
        await super().adapt()


# --------------------------------------------------------------------------- positions
def test_positional_resources_mean_what_they_mean_in_evaluator() -> None:
    gpu = QueueWorkerResources(1, 1, preferred_gpu_toolkit=QueueWorkerResources.GPUToolkit.CUDA)
    assert (gpu.number_of_threads, gpu.number_of_gpus) == (1, 1)
    pods = PodResources(2, 1, "CUDA", "single", "8 GiB", 10 * openff_unit.gigabyte,
                        {"example.com/fpga": 1}, {"nodeAffinity": {}}, 0, 3)
    assert (pods.number_of_threads, pods.number_of_gpus) == (2, 1)
    assert pods.preferred_gpu_toolkit is GPUToolkit.CUDA
    assert pods.preferred_gpu_precision.value == "single"
    assert pods.memory_bytes == 8 * 2**30
    assert pods.ephemeral_storage_limit.to(unit.byte).magnitude == 10 * 10**9
    assert pods.additional_limit_specifications == {"example.com/fpga": "1"}
    assert pods.affinity_specification == {"nodeAffinity": {}}
    assert (pods.minimum_number_of_workers, pods.maximum_number_of_workers) == (0, 3)
    with pytest.raises(TypeError, match="PodResources"):
        PodResources(*range(11))  # tolerations, hybrid's own, is keyword-only


def test_positional_batch_backends_mean_what_they_mean_in_evaluator(staging) -> None:
    resources = QueueWorkerResources(2, per_thread_memory_limit="2 GiB")
    pbs = DaskPBSBackend(0, 3, resources, "workq", ["module load gromacs"], ["-A chem"], "5s",
                         True, "select=1:ncpus=2:mem=4gb", CountingAdaptive)
    script = pbs.job_script()
    assert "\n#PBS -l select=1:ncpus=2:mem=4gb\n" in script
    assert "select=1:ncpus=2:mem=4096mb" not in script  # the line replaces hybrid's own
    assert "\n#PBS -q workq\n" in script and "\n#PBS -A chem\n" in script
    assert "module load gromacs" in script and "--no-nanny" in script
    assert (pbs.minimum_number_of_workers, pbs.maximum_number_of_workers) == (0, 3)
    assert pbs.adaptive_interval == 5 and pbs.adaptive_class is CountingAdaptive
    for cls in (DaskSLURMBackend, DaskLSFBackend, DaskHTCondorBackend):
        backend = cls(1, 2, resources, None, None, None, "10000ms", False, CountingAdaptive)
        assert backend.adaptive_class is CountingAdaptive
    base = BaseDaskJobQueueBackend(1, 1, resources, None, None, None, "1s", False, "slurm")
    assert base.pool_spec.system == "slurm" and "#SBATCH --cpus-per-task=2" in base.job_script()


def test_positional_kubernetes_backends_mean_what_they_mean_in_evaluator() -> None:
    secret = KubernetesSecret(name="openeye-license", secret_name="oe-license",
                              mount_path="/secrets/oe_license.txt", sub_path="oe_license.txt")
    for cls in (DaskKubernetesBackend, DaskKubernetesExistingBackend):
        backend = cls(evaluator_gpu_pods(), evaluator_cpu_pods(), "evaluator", 8786, True,
                      "ghcr.io/example/evaluator:1", "openforcefield", {"OE_LICENSE": "/x"},
                      [secret], SCRATCH, {"resource_timeout": None}, True, False)
        assert backend.cluster_name == "evaluator" and backend.cluster_port == 8786
        assert backend.namespace == "openforcefield" and backend.annotate_resources is True
        [gpu_pod] = backend.manifests()["gpu"]
        spec = gpu_pod["spec"]
        container = spec["containers"][0]
        assert container["image"] == "ghcr.io/example/evaluator:1"
        assert {"name": "OE_LICENSE", "value": "/x"} in container["env"]
        # evaluator's mounts, and hybrid's own: the cluster's TLS files (TLS by default)
        assert {m["mountPath"] for m in container["volumeMounts"]} == {
            "/secrets/oe_license.txt", "/evaluator-storage", "/etc/hybrid/tls"}
        assert "--no-nanny" in container["command"]
        assert spec["affinity"] == NODE_AFFINITY


def test_the_pods_of_evaluators_resources_carry_its_limits_and_worker_resources() -> None:
    """What openff-evaluator's private-name tests of PodResources check, through hybrid's
    public values and the pods it renders (its ``_to_kubernetes_resource_limits`` writes
    ``"5000.000Gi"`` for 5 TB; Kubernetes reads hybrid's ``"5T"`` as the same size)."""
    gpu, cpu = evaluator_gpu_pods(), evaluator_cpu_pods()
    assert (gpu.number_of_threads, gpu.number_of_gpus, gpu.minimum_number_of_workers,
            gpu.maximum_number_of_workers) == (1, 1, 1, 1)
    assert gpu.affinity_specification == NODE_AFFINITY and cpu.affinity_specification is None
    backend = DaskKubernetesBackend(gpu, cpu, volumes=SCRATCH, annotate_resources=True)
    pods = {group: pods[0]["spec"] for group, pods in backend.manifests().items()}
    gpu_container, cpu_container = (pods[g]["containers"][0] for g in ("gpu", "cpu"))
    assert gpu_container["resources"]["limits"] == {
        "cpu": "1", "memory": "4Gi", "ephemeral-storage": "20Gi", "nvidia.com/gpu": "1"}
    assert cpu_container["resources"]["limits"] == {
        "cpu": "1", "memory": "5T", "ephemeral-storage": "20M"}
    assert gpu_container["resources"]["requests"] == gpu_container["resources"]["limits"]
    for container, advertised in ((gpu_container, "GPU=1 notGPU=0"),
                                  (cpu_container, "GPU=0 notGPU=1")):
        command = container["command"]
        assert command[command.index("--resources") + 1] == advertised
    assert pods["gpu"]["affinity"] == NODE_AFFINITY and "affinity" not in pods["cpu"]
    extra = PodResources(additional_limit_specifications={"example.com/fpga": 2})
    [pod] = DaskKubernetesBackend(cpu_resources_per_worker=extra, volumes=SCRATCH
                                  ).manifests()["cpu"]
    limits = pod["spec"]["containers"][0]["resources"]
    assert limits["limits"]["example.com/fpga"] == limits["requests"]["example.com/fpga"] == "2"


# --------------------------------------------------------------------------- no batch tool
TOOLS = [(DaskLSFBackend, "bsub"), (DaskPBSBackend, "qsub"), (DaskSLURMBackend, "sbatch")]


@pytest.fixture
def no_batch_tools(path_without_batch_tools: str, staging: Path, monkeypatch) -> Path:
    """No batch system's tools here, short reconcile periods."""
    monkeypatch.setenv("PATH", path_without_batch_tools)
    with dask.config.set({"hybrid.batch.poll-interval": "0.3s"}):
        yield staging


def _leftovers(staging: Path) -> list[Path]:
    return [p for p in staging.rglob("*") if p.is_file()] if staging.exists() else []


@pytest.mark.parametrize(("cls", "tool"), TOOLS, ids=[c.__name__ for c, _ in TOOLS])
def test_start_without_the_tool_returns_warns_once_and_every_wait_raises(
        cls, tool: str, no_batch_tools: Path) -> None:
    backend = cls(resources_per_worker=QueueWorkerResources(1, 1, preferred_gpu_toolkit="CUDA"),
                  setup_script_commands=["module load cuda/9.2"])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        backend.start()  # returns, as openff-evaluator's does
        try:
            assert backend.started
            assert "module load cuda/9.2" in backend.job_script()
            pool = backend.cluster.pools[backend.pool_name]
            assert pool.failed and f"'{tool}' was not found" in pool.failed  # the first try
            assert pool.submit_calls == 0
            with pytest.raises(PoolFailed, match=f"'{tool}' was not found"):
                backend.client.wait_for_workers(1)  # no timeout: it does not wait at all
            future = backend.submit_task(sum, [1, 2])  # submitted after the pool failed
            with pytest.raises(RuntimeError, match=f"'{tool}' was not found"):
                future.result(timeout=60)
            gpu = backend.submit_task(sum, [3], gpu_task=True)
            with pytest.raises(RuntimeError, match="gave up"):
                gpu.result(timeout=60)
        finally:
            backend.stop()
    ours = [w for w in caught if issubclass(w.category, BatchToolMissingWarning)]
    assert len(ours) == 1, [str(w.message) for w in caught]
    assert tool in str(ours[0].message) and "job_script()" in str(ours[0].message)
    assert ours[0].filename == __file__  # it points at the caller's line
    assert _leftovers(no_batch_tools) == []


def test_an_adaptive_backend_without_its_tool_warns_at_start_and_fails_at_first_need(
        no_batch_tools: Path) -> None:
    backend = DaskSLURMBackend(0, 2, adaptive_interval="0.2s")
    with pytest.warns(BatchToolMissingWarning, match="sbatch"):
        backend.start()
    try:
        pool = backend.cluster.pools["cpu"]
        assert not pool.failed  # nothing was needed yet
        future = backend.submit_task(sum, [1, 2])
        with pytest.raises(RuntimeError, match="'sbatch' was not found"):
            future.result(timeout=60)
        assert pool.failed and pool.failures == 1  # the first submission gave up
        with pytest.raises(PoolFailed):
            backend.cluster.wait_for_workers(1, timeout=60)
    finally:
        backend.stop()
    assert _leftovers(no_batch_tools) == []


def test_adaptive_class_scales_the_pool_for_real(staging) -> None:
    """``adaptive_class`` is the class that scales the pool, as in openff-evaluator (here on
    local processes: ``cluster_type="local"``); equal bounds still adapt with it."""
    from tests.batch._tasks import pack

    CountingAdaptive.adapted = 0
    backend = BaseDaskJobQueueBackend(1, 1, None, None, None, None, "0.2s", False, "local",
                                      CountingAdaptive)
    with backend:
        assert backend.submit_task(pack, 3).result(timeout=120) is not None
        assert isinstance(backend.cluster.pools["cpu"].adaptive, CountingAdaptive)
    assert CountingAdaptive.adapted >= 1


# --------------------------------------------------------------------------- refusals
#: What openff-evaluator refuses (with a ValueError, or an assert), then hybrid's own checks
#: of the parameters it adds or gives a meaning.
REFUSED = [
    ("no resources", lambda: DaskKubernetesBackend(), "gpu_resources_per_worker",
     "must be specified"),
    ("no volumes", lambda: DaskKubernetesBackend(evaluator_gpu_pods()), "volumes",
     "No volumes specified"),
    ("existing, no volumes", lambda: DaskKubernetesExistingBackend(evaluator_gpu_pods()),
     "volumes", "No volumes specified"),
    ("not pod resources", lambda: DaskKubernetesBackend("gpu", volumes=SCRATCH),
     "gpu_resources_per_worker", "PodResources"),
    ("jupyter", lambda: DaskKubernetesBackend(evaluator_gpu_pods(), volumes=SCRATCH,
                                              include_jupyter=True), "include_jupyter",
     "Run Jupyter where the backend runs"),
    ("port", lambda: DaskKubernetesBackend(evaluator_gpu_pods(), volumes=SCRATCH,
                                           cluster_port=70000), "cluster_port", "65535"),
    ("distributed's Adaptive", lambda: DaskSLURMBackend(adaptive_class=Adaptive),
     "DaskSLURMBackend.adaptive_class", "subclass PoolAdaptive"),
    ("no cluster_type", lambda: BaseDaskJobQueueBackend(),
     "BaseDaskJobQueueBackend.cluster_type", "DaskSLURMBackend"),
    ("resource line on two lines", lambda: DaskPBSBackend(resource_line="select=1\n#PBS -V"),
     "DaskPBSBackend.resource_line", "line breaks"),
    ("compute resources for a queue", lambda: DaskLSFBackend(
        resources_per_worker=ComputeResources()), "DaskLSFBackend.resources_per_worker",
     "QueueWorkerResources"),
    ("minimum above maximum", lambda: PodResources(minimum_number_of_workers=2,
                                                   maximum_number_of_workers=1),
     "PodResources.minimum_number_of_workers", "at most maximum_number_of_workers"),
    ("zero memory", lambda: QueueWorkerResources(per_thread_memory_limit=0 * openff_unit.byte),
     "QueueWorkerResources.per_thread_memory_limit", "larger than zero"),
    ("memory in seconds", lambda: QueueWorkerResources(
        per_thread_memory_limit=3 * openff_unit.second),
     "QueueWorkerResources.per_thread_memory_limit", "unit of information"),
    ("wall time not HH:MM", lambda: QueueWorkerResources(wallclock_time_limit="1h"),
     "QueueWorkerResources.wallclock_time_limit", "HH:MM"),
    ("limits not a mapping", lambda: PodResources(additional_limit_specifications=["x"]),
     "PodResources.additional_limit_specifications", "a mapping of Kubernetes resource names"),
    ("limits setting the cpu", lambda: PodResources(additional_limit_specifications={"cpu": 2}),
     "PodResources.additional_limit_specifications", "number_of_threads"),
    ("limits not a quantity", lambda: PodResources(
        additional_limit_specifications={"example.com/fpga": "two"}),
     "PodResources.additional_limit_specifications", "'two'"),
    ("affinity not a mapping", lambda: PodResources(affinity_specification=["x"]),
     "PodResources.affinity_specification", "affinity mapping"),
]


@pytest.mark.parametrize(("case", "make", "field", "words"), REFUSED,
                         ids=[r[0] for r in REFUSED])
def test_what_evaluator_refuses_is_refused_with_a_value_error_that_says_why(
        case, make, field: str, words: str) -> None:
    with pytest.raises(ValueError) as caught:
        make()
    error = caught.value
    assert isinstance(error, ConfigurationError)
    assert error.field == field
    assert words in str(error)
    assert error.__cause__ is None and (error.__context__ is None
                                        or error.__suppress_context__)


# --------------------------------------------------------------------------- openff-units
def test_openff_units_mix_with_pint_and_strings_wherever_quantities_are_taken() -> None:
    assert openff_unit is not unit and type(openff_unit).__module__ == "openff.units.units"
    same = [QueueWorkerResources(per_thread_memory_limit=m, wallclock_time_limit=w)
            for m, w in ((3 * openff_unit.gigabyte, 90 * openff_unit.minute),
                         (3 * unit.gigabyte, 1.5 * unit.hour),
                         ("3 GB", "01:30"),
                         (np.float64(3.0) * openff_unit.gigabyte, "01:30:00"))]
    assert all(r == same[0] for r in same)
    assert same[0].memory_bytes == 3 * 10**9 and same[0].wallclock_time_limit == "01:30"
    pods = PodResources(memory_limit=2 * openff_unit.gibibyte, ephemeral_storage_limit="1 GiB")
    assert pods == PodResources(memory_limit="2 GiB", ephemeral_storage_limit=1 * unit.GiB)
    spec = PoolSpec.build("cpu", "slurm", memory=2 * openff_unit.gigabyte,
                          walltime=2 * openff_unit.hour, lease=3 * openff_unit.hour)
    assert (spec.memory, spec.walltime, spec.lease) == (2 * 10**9, "02:00", 3 * 3600)
    backend = DaskSLURMBackend(0, 2, adaptive_interval=500 * openff_unit.millisecond)
    assert backend.adaptive_interval == 0.5
    scratch = KubernetesEmptyDirVolume(name="s", mount_path="/s",
                                       size_limit=500 * openff_unit.megabyte)
    assert scratch.volume() == {"name": "s", "emptyDir": {"sizeLimit": "500M"}}


def test_openff_quantities_survive_pickling_after_openff_units_took_pints_registry() -> None:
    """openff-units makes its registry pint's application registry, into which pint
    unpickles every quantity: resources travel as plain data, so nothing mixes registries."""
    import pint

    assert pint.get_application_registry().get() is openff_unit
    resources = QueueWorkerResources(per_thread_memory_limit=1.5 * openff_unit.gigabyte)
    copy = pickle.loads(pickle.dumps(resources))
    assert copy == resources and copy.memory_bytes == 1_500_000_000
    assert copy.per_thread_memory_limit._REGISTRY is unit


BATCH_LINES = {
    DaskHTCondorBackend: ["request_memory = 5723", "--memory-limit 6000000000"],
    DaskSLURMBackend: ["#SBATCH --mem=5723M", "#SBATCH --time=01:30:00"],
    DaskPBSBackend: ["#PBS -l select=1:ncpus=2:mem=5723mb", "#PBS -l walltime=01:30:00"],
    DaskLSFBackend: ["#BSUB -M 5723MB", '#BSUB -R "rusage[mem=5723MB]"', "#BSUB -W 01:30"],
}


@pytest.mark.parametrize("cls", list(BATCH_LINES), ids=lambda c: c.__name__)
def test_an_openff_quantity_reaches_each_batch_backends_job_script(cls) -> None:
    """2 threads x 3 GB (6e9 bytes, 5723 MiB rounded up) for 90 minutes, in openff-units."""
    resources = QueueWorkerResources(2, per_thread_memory_limit=3 * openff_unit.gigabyte,
                                     wallclock_time_limit=90 * openff_unit.minute)
    script = cls(resources_per_worker=resources).job_script()
    for line in BATCH_LINES[cls]:
        assert line in script, f"{line!r} not in\n{script}"
    assert "--nthreads 2 --memory-limit 6000000000" in script


def test_an_openff_quantity_reaches_the_kubernetes_backends_pods() -> None:
    backend = DaskKubernetesBackend(cpu_resources_per_worker=evaluator_cpu_pods(),
                                    volumes=SCRATCH)
    text = backend.job_script()
    assert "memory: 5T" in text and "ephemeral-storage: 20M" in text
    [pod] = backend.manifests()["cpu"]
    command = pod["spec"]["containers"][0]["command"]
    assert command[command.index("--memory-limit") + 1] == "5000000000000"
