"""hybrid's constructors beside openff-evaluator's (issue 24): the same positional order,
every keyword, hybrid's own parameters keyword-only after theirs; the docs' table is this
comparison; the vendored files are the upstream ones."""

from __future__ import annotations

import ast
import hashlib
import re
from pathlib import Path

import pytest

from hybrid.resources import GPUPrecision, GPUToolkit
from tests.evaluator import signatures
from tests.evaluator.conftest import NOT_APPLICABLE, UPSTREAM

HERE = Path(__file__).resolve().parent
DOCS = HERE.parents[1] / "docs" / "openff-evaluator.md"
CLASSES = list(signatures.evaluator_classes())


def test_every_public_class_of_evaluators_backends_is_compared() -> None:
    assert set(CLASSES) == set(signatures.OURS)
    assert {"DaskSLURMBackend", "PodResources", "DaskKubernetesExistingBackend",
            "KubernetesSecret", "AccessMode"} <= set(CLASSES)  # the reading found them


@pytest.mark.parametrize("name", CLASSES)
def test_our_constructor_takes_evaluators_parameters_in_its_order(name: str) -> None:
    comparison = signatures.compare(name)
    assert comparison.missing == [], f"{name} lacks openff-evaluator's {comparison.missing}"
    assert comparison.misplaced == [], (
        f"{name}: {comparison.misplaced} are not at openff-evaluator's positions "
        f"{comparison.positional}")
    assert comparison.added_positional == [], (
        f"{name}: hybrid's own {comparison.added_positional} must be keyword-only")
    assert comparison.missing_members == []


def test_the_comparison_sees_a_difference() -> None:
    """The reading of both sides is live: openff-evaluator's positions are what its source
    says, and a constructor that differs is caught."""
    classes = signatures.evaluator_classes()
    pbs = [n for n, _, _ in signatures.evaluator_parameters("DaskPBSBackend", classes)]
    assert pbs[8:] == ["resource_line", "adaptive_class"]
    pod = [n for n, _, _ in signatures.evaluator_parameters("PodResources", classes)]
    assert pod[:2] == ["number_of_threads", "number_of_gpus"]
    secret = signatures.evaluator_parameters("KubernetesSecret", classes)
    assert [n for n, _, _ in secret] == ["name", "mount_path", "secret_name", "sub_path",
                                         "read_only"]
    assert all(kind is signatures.KEYWORD for _, kind, _ in secret)  # a pydantic model

    class Swapped:
        GPUToolkit = GPUToolkit
        GPUPrecision = GPUPrecision

        def __init__(self, number_of_gpus=0, number_of_threads=1, *, extra=None,
                     preferred_gpu_toolkit=None):
            pass

    signatures.OURS["Swapped"] = __name__
    globals()["Swapped"] = Swapped
    classes["Swapped"] = classes["ComputeResources"]
    try:
        comparison = signatures.compare("Swapped", classes)
    finally:
        del signatures.OURS["Swapped"], globals()["Swapped"]
    assert comparison.missing == ["preferred_gpu_precision"]
    assert comparison.misplaced == ["number_of_threads", "number_of_gpus",
                                    "preferred_gpu_toolkit"]
    assert not comparison.ok


def test_the_docs_carry_the_table_of_this_comparison() -> None:
    """docs/openff-evaluator.md shows :func:`signatures.table` as it is now
    (``python -m tests.evaluator.signatures`` prints it)."""
    text = DOCS.read_text()
    match = re.search(r"<!-- signature-table -->\n(.*?)<!-- /signature-table -->", text,
                      re.DOTALL)
    assert match, "docs/openff-evaluator.md has no <!-- signature-table --> section"
    assert match[1] == signatures.table()


def test_not_applicable_tests_exist_and_every_upstream_skip_is_among_them() -> None:
    """The one list of tests left out names real tests, and it holds every test
    openff-evaluator skips itself (ci/test.sh reports no skip)."""
    tests, skipped = set(), set()
    for path in sorted(UPSTREAM.glob("test_*.py")):
        for node in ast.parse(path.read_text()).body:
            functions = [(None, node)] if isinstance(node, ast.FunctionDef) else [
                (node.name, f) for f in node.body if isinstance(f, ast.FunctionDef)
            ] if isinstance(node, ast.ClassDef) else []
            for klass, function in functions:
                if not function.name.startswith("test_"):
                    continue
                key = "::".join([path.name, *([klass] if klass else []), function.name])
                tests.add(key)
                if any(ast.unparse(d).startswith("pytest.mark.skip(")
                       for d in function.decorator_list):
                    skipped.add(key)
    assert set(NOT_APPLICABLE) <= tests
    assert len(skipped) == 3 and skipped <= set(NOT_APPLICABLE)
    # what runs: test_dask_job_script_creation, the 3 cases of
    # test_dask_jobqueue_backend_creation, and the Kubernetes backend's 2 refusals
    assert sorted(tests - set(NOT_APPLICABLE)) == [
        "test_dask.py::test_dask_job_script_creation",
        "test_dask.py::test_dask_jobqueue_backend_creation",
        "test_dask_kubernetes.py::TestDaskKubernetesBackend::"
        "test_no_initialization_without_resources",
        "test_dask_kubernetes.py::TestDaskKubernetesBackend::"
        "test_no_initialization_without_volumes"]


def _blob(path: Path) -> str:
    data = path.read_bytes()
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


@pytest.mark.parametrize("directory", ["upstream", "_vendor"])
def test_vendored_files_are_the_upstream_blobs(directory: str) -> None:
    text = (HERE / directory / "UPSTREAM.md").read_text()
    rows = re.findall(r"^\| `([^`]+)` \| `[^`]+` \| `([0-9a-f]{40})` \|$", text, re.MULTILINE)
    assert len(rows) >= 9
    for name, blob in rows:
        assert _blob(HERE / directory / name) == blob, f"{directory}/{name} was changed"
    listed = {name for name, _ in rows}
    present = {str(p.relative_to(HERE / directory)) for p in (HERE / directory).rglob("*")
               if p.is_file() and p.suffix in (".py", ".txt", "") and "dist-info" not in str(p)
               and "__pycache__" not in str(p)}
    present.discard("__init__.py")  # ours: it makes upstream/ a package of the suite
    assert present == listed  # nothing unlisted, nothing missing
