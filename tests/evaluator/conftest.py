"""openff-evaluator's own backend tests, unchanged, against hybrid's backends (issue 24).

- ``upstream/``: openff-evaluator's ``_tests/test_backends`` and, for the signature test,
  its ``backends`` modules (read as text, never imported), MIT; ``upstream/UPSTREAM.md``
  names the commit.
- ``_vendor/``: the parts of openff-units and openff-utilities those tests import (neither
  is on PyPI), unchanged, MIT; ``_vendor/UPSTREAM.md`` names the commits.
- ``shim/``: ``openff.evaluator.backends`` mapped to :mod:`hybrid.backends`, as a user
  switching changes an import.

This file puts ``shim`` and ``_vendor`` on ``sys.path``, runs the upstream tests as
openff-evaluator's CI runs them (on a machine with no batch system's tools), and is the one
place that says which upstream tests do not apply to hybrid, and why: they are deselected
(never skipped) and the summary prints each with its reason.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import dask
import pytest

HERE = Path(__file__).resolve().parent
UPSTREAM = HERE / "upstream" / "test_backends"
for path in (HERE / "shim", HERE / "_vendor"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

#: The only upstream tests not run: ``file::test`` -> why. They read openff-evaluator's
#: private names (hybrid keeps its state elsewhere), or openff-evaluator skips them itself.
NOT_APPLICABLE = {
    "test_backends.py::TestPodResources::test_podresources_initialization_gpu":
        "reads PodResources' private attributes (_number_of_threads, _resources, ...); "
        "tests/evaluator/test_compatibility.py checks the public values",
    "test_backends.py::TestPodResources::test_to_kubernetes_resources_limits_gpu":
        "calls the private _to_kubernetes_resource_limits; hybrid's pod manifests carry the "
        "limits (tests/evaluator/test_compatibility.py checks them)",
    "test_backends.py::TestPodResources::test_podresources_initialization_cpu":
        "reads PodResources' private attributes (_number_of_threads, _resources, ...); "
        "tests/evaluator/test_compatibility.py checks the public values",
    "test_backends.py::TestPodResources::test_to_kubernetes_resources_limits_cpu":
        "calls the private _to_kubernetes_resource_limits; hybrid's pod manifests carry the "
        "limits (tests/evaluator/test_compatibility.py checks them)",
    "test_dask.py::test_multiprocessor":
        "skipped by openff-evaluator itself ('This code currently hangs only on travis.'), "
        "and tests the private _Multiprocessor, which hybrid does not have",
    "test_dask.py::test_lsf_wrapped_function":
        "skipped by openff-evaluator itself ('This code currently hangs only on travis.'), "
        "and calls the private _wrapped_function, which hybrid does not have",
    "test_dask_kubernetes.py::TestDaskKubernetesBackend::test_generate_volume_specifications":
        "calls the private _generate_volume_specifications; hybrid's pod manifests carry the "
        "volumes (tests/kubernetes/test_k8s_manifests.py)",
    "test_dask_kubernetes.py::TestDaskKubernetesBackend::test_generate_worker_spec":
        "calls the private _generate_worker_spec and compares with dask-kubernetes' operator "
        "spec, which hybrid does not use (its pods: tests/kubernetes/test_k8s_manifests.py)",
    "test_dask_kubernetes.py::TestDaskKubernetesBackend::test_generate_cluster_spec":
        "calls the private _generate_cluster_spec (a dask-kubernetes operator cluster with a "
        "scheduler pod); hybrid's scheduler runs in the starting process",
    "test_dask_kubernetes.py::TestDaskKubernetesBackend::test_start":
        "skipped by openff-evaluator itself ('Currently only works with existing kubectl "
        "credentials.'); hybrid's backends start against the API double in tests/kubernetes",
}

#: The batch tools openff-evaluator's CI machines lack (the systems' own lists, and the
#: history tools); hidden from the upstream tests' PATH.
_HIDDEN = ("sacct", "scontrol", "sinfo", "bhist")

_LEFT_OUT = pytest.StashKey[list]()


def upstream_key(item: pytest.Item) -> str | None:
    """``file::test`` of an upstream test (``None`` for any other test)."""
    if UPSTREAM not in Path(item.path).parents:
        return None
    return "::".join([Path(item.path).name, *item.nodeid.split("::")[1:]])


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    left = [item for item in items if upstream_key(item) in NOT_APPLICABLE]
    if left:
        config.hook.pytest_deselected(items=left)
        items[:] = [item for item in items if item not in left]
        config.stash[_LEFT_OUT] = [upstream_key(item) for item in left]


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    left = config.stash.get(_LEFT_OUT, [])
    if left:
        terminalreporter.write_line(f"openff-evaluator: {len(left)} of its backend tests do "
                                    "not apply to hybrid (deselected, tests/evaluator/"
                                    "conftest.py):", yellow=True)
        for key in left:
            terminalreporter.write_line(f"  {key}: {NOT_APPLICABLE[key]}", yellow=True)


def _tools() -> set[str]:
    from hybrid.batch import system_class

    return {tool for name in ("slurm", "pbs", "lsf") for tool in system_class(name).tools
            } | set(_HIDDEN)


@pytest.fixture(scope="session")
def path_without_batch_tools(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A PATH of links to every program on this PATH but the batch systems' tools."""
    directory = tmp_path_factory.mktemp("path-without-batch-tools")
    hidden = _tools()
    for entry in os.environ.get("PATH", "").split(os.pathsep):
        if not entry or not os.path.isdir(entry):
            continue
        for program in os.listdir(entry):
            target = Path(entry) / program
            link = directory / program
            if program in hidden or link.exists() or not os.access(target, os.X_OK):
                continue
            link.symlink_to(target)
    assert not any(shutil.which(tool, path=str(directory)) for tool in hidden)
    return str(directory)


@pytest.fixture(autouse=True)
def as_on_evaluators_ci(request: pytest.FixtureRequest, tmp_path: Path,
                        monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Upstream tests run where openff-evaluator's CI runs them: no batch system here."""
    if upstream_key(request.node) is None:
        yield
        return
    monkeypatch.setenv("PATH", request.getfixturevalue("path_without_batch_tools"))
    with dask.config.set({"hybrid.batch.staging-directory": str(tmp_path / "staging")}):
        yield
