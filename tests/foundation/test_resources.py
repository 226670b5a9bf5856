"""hybrid.resources: openff-evaluator-style resource classes, validation and exact round-trips."""

from __future__ import annotations

import json
import pickle

import numpy as np
import pint
import pytest

import hybrid
from hybrid import resources as resources_module
from hybrid.errors import ConfigurationError
from hybrid.resources import (
    ComputeResources,
    GPUPrecision,
    GPUToolkit,
    PodResources,
    QueueWorkerResources,
    resources_from_json,
)
from hybrid.units import unit

#: A registry that is not ours: the stand-in for openff-units (itself a pint registry).
openff_like = pint.UnitRegistry()


# ---------------------------------------------------------------- constructors and names


def test_compute_resources_takes_evaluator_argument_names():
    resources = ComputeResources(
        number_of_threads=4,
        number_of_gpus=1,
        preferred_gpu_toolkit=ComputeResources.GPUToolkit.CUDA,
        preferred_gpu_precision=ComputeResources.GPUPrecision.single,
    )
    assert resources.number_of_threads == 4
    assert resources.number_of_gpus == 1
    assert resources.preferred_gpu_toolkit is GPUToolkit.CUDA
    assert resources.preferred_gpu_precision is GPUPrecision.single
    assert resources.is_gpu
    assert not ComputeResources().is_gpu


def test_queue_worker_resources_takes_evaluator_argument_names():
    resources = QueueWorkerResources(
        number_of_threads=2,
        number_of_gpus=1,
        preferred_gpu_toolkit=QueueWorkerResources.GPUToolkit.OpenCL,
        per_thread_memory_limit=4 * unit.gigabytes,
        wallclock_time_limit="05:59",
    )
    assert resources.preferred_gpu_toolkit is GPUToolkit.OpenCL
    assert resources.memory_bytes == 2 * 4 * 10**9
    assert resources.wallclock_time_limit == "05:59"
    assert resources.wallclock_seconds == 5 * 3600 + 59 * 60
    assert isinstance(resources, ComputeResources)


def test_pod_resources_takes_its_argument_names():
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {}}}
    tolerations = [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}]
    resources = PodResources(
        minimum_number_of_workers=0,
        maximum_number_of_workers=5,
        number_of_threads=2,
        memory_limit="8 GiB",
        ephemeral_storage_limit=20 * openff_like.gigabytes,
        number_of_gpus=1,
        preferred_gpu_toolkit="auto",
        preferred_gpu_precision="double",
        affinity_specification=affinity,
        tolerations=tolerations,
    )
    assert resources.memory_bytes == 8 * 2**30
    assert resources.preferred_gpu_toolkit is GPUToolkit.auto
    assert resources.preferred_gpu_precision is GPUPrecision.double
    assert resources.affinity_specification == affinity
    assert resources.tolerations == tolerations


def test_gpu_toolkit_is_reachable_where_evaluator_code_looks_for_it():
    assert hybrid.GPUToolkit is GPUToolkit
    assert resources_module.GPUToolkit is GPUToolkit
    assert ComputeResources.GPUToolkit is GPUToolkit
    assert QueueWorkerResources.GPUToolkit is GPUToolkit
    assert ComputeResources.GPUPrecision is GPUPrecision
    assert {member.value for member in GPUToolkit} == {"CUDA", "OpenCL", "auto"}
    assert {member.value for member in GPUPrecision} == {"single", "mixed", "double"}


@pytest.mark.parametrize(("text", "member"), [("cuda", GPUToolkit.CUDA),
                                               ("OPENCL", GPUToolkit.OpenCL),
                                               (" auto ", GPUToolkit.auto)])
def test_toolkit_strings_are_case_insensitive(text, member):
    assert ComputeResources(number_of_gpus=1, preferred_gpu_toolkit=text).preferred_gpu_toolkit \
        is member


# ---------------------------------------------------------------- memory and storage units


@pytest.mark.parametrize(
    ("memory", "expected_bytes"),
    [
        (8 * unit.gigabytes, 8 * 10**9),
        (8 * openff_like.gigabytes, 8 * 10**9),
        (openff_like.Quantity(3, "GiB"), 3 * 2**30),
        ("8 GiB", 8 * 2**30),
        ("512MB", 512 * 10**6),
    ],
)
def test_memory_accepts_our_quantities_other_registries_and_strings(memory, expected_bytes):
    queue = QueueWorkerResources(number_of_threads=2, per_thread_memory_limit=memory)
    assert queue.memory_bytes == 2 * expected_bytes
    pod = PodResources(memory_limit=memory, ephemeral_storage_limit=memory)
    assert pod.memory_bytes == expected_bytes
    assert pod == PodResources(memory_limit=f"{expected_bytes} B",
                               ephemeral_storage_limit=f"{expected_bytes} B")


# ---------------------------------------------------------------- exact round-trips


ROUND_TRIP_CASES = [
    ComputeResources(),
    ComputeResources(number_of_threads=3, number_of_gpus=2, preferred_gpu_toolkit="OpenCL",
                     preferred_gpu_precision="double"),
    ComputeResources(number_of_gpus=0, preferred_gpu_toolkit=None, preferred_gpu_precision=None),
    QueueWorkerResources(number_of_threads=2, number_of_gpus=1,
                         per_thread_memory_limit=1.5 * unit.gigabytes,
                         wallclock_time_limit="05:59"),
    QueueWorkerResources(per_thread_memory_limit=3 * openff_like.GiB,
                         wallclock_time_limit=90 * openff_like.minute),
    QueueWorkerResources(per_thread_memory_limit="512MB", wallclock_time_limit="100:01"),
    QueueWorkerResources(per_thread_memory_limit=0.1 * unit.GiB),
    PodResources(minimum_number_of_workers=0, maximum_number_of_workers=4, number_of_threads=2,
                 memory_limit=6 * openff_like.GiB, ephemeral_storage_limit="20 GB",
                 number_of_gpus=1, affinity_specification={"podAntiAffinity": {}},
                 tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists"}]),
]

CASE_IDS = [f"{type(r).__name__}-{i}" for i, r in enumerate(ROUND_TRIP_CASES)]


def _exact_state(resources) -> dict:
    """What must survive a round trip exactly: every field, memory in bytes, wall time."""
    state = {"type": type(resources).__name__, **resources.to_dict()}
    for name in resources._memory_fields:
        state[name] = round(getattr(resources, name).to(unit.byte).magnitude)
    if isinstance(resources, QueueWorkerResources):
        state["memory_bytes"] = resources.memory_bytes
        state["wallclock_seconds"] = resources.wallclock_seconds
    return state


def _via_dict(r):
    return type(r).from_dict(json.loads(json.dumps(r.to_dict())))


def _via_json(r):
    return type(r).from_json(r.to_json())


def _via_resources_from_json(r):
    return resources_from_json(r.to_json())


def _via_pickle(r):
    return pickle.loads(pickle.dumps(r))


@pytest.mark.parametrize("resources", ROUND_TRIP_CASES, ids=CASE_IDS)
@pytest.mark.parametrize("trip", [_via_dict, _via_json, _via_resources_from_json, _via_pickle],
                         ids=lambda f: f.__name__)
def test_round_trip_is_exact(resources, trip):
    copy = trip(resources)
    assert type(copy) is type(resources)
    assert copy == resources
    assert _exact_state(copy) == _exact_state(resources)
    # and a second trip changes nothing either
    assert _exact_state(trip(copy)) == _exact_state(resources)


@pytest.mark.parametrize("resources", ROUND_TRIP_CASES, ids=CASE_IDS)
def test_hash_agrees_with_equality(resources):
    """Equal objects hash equal, so resources can key a dict (one pool per resource kind)."""
    copy = _via_pickle(resources)
    assert hash(copy) == hash(resources)
    assert {resources: "pool"}[copy] == "pool"


@pytest.mark.parametrize("magnitude", [np.float64(1.5), np.int64(2)], ids=repr)
@pytest.mark.parametrize("trip", [_via_json, _via_pickle], ids=lambda f: f.__name__)
def test_round_trip_of_a_numpy_magnitude(magnitude, trip):
    """Quantities computed with numpy (as openff-units ones often are) must round-trip too."""
    resources = QueueWorkerResources(per_thread_memory_limit=magnitude * openff_like.GiB)
    copy = trip(resources)
    assert copy == resources
    assert copy.memory_bytes == resources.memory_bytes == int(magnitude * 2**30)


def test_equality_is_by_value_and_type():
    assert QueueWorkerResources(per_thread_memory_limit="1 GiB") == QueueWorkerResources(
        per_thread_memory_limit="1024 MiB")
    assert QueueWorkerResources(per_thread_memory_limit="1 GiB") != QueueWorkerResources(
        per_thread_memory_limit="1 GB")
    assert ComputeResources() != QueueWorkerResources()
    assert len({ComputeResources(), ComputeResources(number_of_threads=1)}) == 1


def test_json_of_one_class_is_refused_by_another():
    text = ComputeResources().to_json()
    with pytest.raises(ConfigurationError, match="'PodResources' JSON"):
        PodResources.from_json(text)
    with pytest.raises(ConfigurationError, match="one of ComputeResources"):
        resources_from_json(json.dumps({"type": "Nope"}))


def test_from_dict_refuses_unknown_fields():
    data = {**ComputeResources().to_dict(), "number_of_cpus": 2}
    with pytest.raises(ConfigurationError) as caught:
        ComputeResources.from_dict(data)
    assert "number_of_cpus" in str(caught.value)
    assert "number_of_threads" in str(caught.value)  # the accepted fields are listed


# ---------------------------------------------------------------- bad values


BAD_VALUES = [
    (ComputeResources, {"number_of_threads": -1}, "ComputeResources.number_of_threads", -1,
     "an integer >= 1"),
    (ComputeResources, {"number_of_threads": 0}, "ComputeResources.number_of_threads", 0,
     "an integer >= 1"),
    (ComputeResources, {"number_of_gpus": -2}, "ComputeResources.number_of_gpus", -2,
     "an integer >= 0"),
    (ComputeResources, {"number_of_threads": 1.5}, "ComputeResources.number_of_threads", 1.5,
     "an integer"),
    (ComputeResources, {"number_of_gpus": 1, "preferred_gpu_toolkit": None},
     "ComputeResources.preferred_gpu_toolkit", None, "CUDA, OpenCL or auto"),
    (QueueWorkerResources, {"number_of_gpus": 2, "preferred_gpu_toolkit": None},
     "QueueWorkerResources.preferred_gpu_toolkit", None, "when number_of_gpus > 0"),
    (ComputeResources, {"number_of_gpus": 1, "preferred_gpu_toolkit": "Vulkan"},
     "ComputeResources.preferred_gpu_toolkit", "Vulkan", "'CUDA', 'OpenCL', 'auto'"),
    (ComputeResources, {"preferred_gpu_precision": "half"},
     "ComputeResources.preferred_gpu_precision", "half", "'single', 'mixed', 'double'"),
    (QueueWorkerResources, {"per_thread_memory_limit": 8},
     "QueueWorkerResources.per_thread_memory_limit", 8, "a bare number has no unit"),
    (QueueWorkerResources, {"per_thread_memory_limit": "8 seconds"},
     "QueueWorkerResources.per_thread_memory_limit", "8 seconds", "unit of information"),
    (QueueWorkerResources, {"per_thread_memory_limit": "0 GiB"},
     "QueueWorkerResources.per_thread_memory_limit", "0 GiB", "larger than zero"),
    (QueueWorkerResources, {"wallclock_time_limit": "5h"},
     "QueueWorkerResources.wallclock_time_limit", "5h", '"HH:MM"'),
    (QueueWorkerResources, {"wallclock_time_limit": "25:99"},
     "QueueWorkerResources.wallclock_time_limit", "25:99", '"HH:MM"'),
    (PodResources, {"memory_limit": 4096}, "PodResources.memory_limit", 4096, "unit"),
    (PodResources, {"ephemeral_storage_limit": "20 meters"},
     "PodResources.ephemeral_storage_limit", "20 meters", "unit of information"),
    (PodResources, {"minimum_number_of_workers": 3, "maximum_number_of_workers": 2},
     "PodResources.minimum_number_of_workers", 3, "at most maximum_number_of_workers (2)"),
    (PodResources, {"minimum_number_of_workers": -1}, "PodResources.minimum_number_of_workers",
     -1, "an integer >= 0"),
    (PodResources, {"maximum_number_of_workers": 0}, "PodResources.maximum_number_of_workers",
     0, "an integer >= 1"),
    (PodResources, {"tolerations": {"key": "gpu"}}, "PodResources.tolerations",
     {"key": "gpu"}, "a list of Kubernetes toleration dicts"),
    (PodResources, {"affinity_specification": ["x"]}, "PodResources.affinity_specification",
     ["x"], "a Kubernetes affinity mapping"),
]


@pytest.mark.parametrize(("cls", "kwargs", "field", "value", "accepted"), BAD_VALUES,
                         ids=[f"{c.__name__}-{sorted(k)[0]}" for c, k, *_ in BAD_VALUES])
def test_bad_values_raise_configuration_error_naming_field_value_and_accepted(
        cls, kwargs, field, value, accepted):
    with pytest.raises(ConfigurationError) as caught:
        cls(**kwargs)
    error = caught.value
    assert isinstance(error, ValueError)  # callers catching ValueError still catch it
    assert error.field == field
    assert error.value == value
    message = str(error)
    assert message.startswith(f"{field} = {value!r} is not valid: expected ")
    assert accepted in message


def test_configuration_error_survives_pickling():
    """Errors raised in a worker reach the client pickled: they must keep field and message."""
    with pytest.raises(ConfigurationError) as caught:
        QueueWorkerResources(wallclock_time_limit="5h")
    copy = pickle.loads(pickle.dumps(caught.value))
    assert (copy.field, copy.value, copy.accepted) == (caught.value.field, caught.value.value,
                                                       caught.value.accepted)
    assert str(copy) == str(caught.value)


def test_configuration_error_with_a_fix_keeps_it_through_pickling():
    error = ConfigurationError("pool.ports", "1:2", "a range of 10 ports", fix="Widen the range.")
    assert str(error).endswith("Widen the range.")
    assert str(pickle.loads(pickle.dumps(error))) == str(error)


@pytest.mark.parametrize("value", ["8G", "8gb"])
def test_a_memory_in_short_units_gets_the_hint_a_pool_gets(value) -> None:
    """``add_pool(memory="8G")`` said what was meant; the resource classes did not."""
    with pytest.raises(ConfigurationError, match='Did you mean "8 GiB"') as caught:
        QueueWorkerResources(per_thread_memory_limit=value)
    assert caught.value.field == "QueueWorkerResources.per_thread_memory_limit"
