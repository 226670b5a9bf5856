"""The suite's tiers: a contributor who is not root runs every test that needs no real pool,
and the tests that need one are left out (deselected and counted), never run to fail.

The contributor is a test double: a pytest plugin that makes ``os.geteuid`` answer 1000 in
the pytest it starts (CI runs as root)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

#: The plugin that plays a contributor who is not root.
NOT_ROOT = "import os\nos.geteuid = lambda: 1000\n"


def collect(tmp_path: Path, plugin: str, *args: str) -> str:
    """``pytest --collect-only -q *args`` with the test double ``plugin`` (a source) loaded:
    its output."""
    (tmp_path / "test_double.py").write_text(plugin)
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "test_double",
         "--collect-only", "-q", *args], cwd=REPO, capture_output=True, text=True, timeout=120,
        env={**os.environ, "PYTHONPATH": str(tmp_path)})
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def listed_ids(output: str) -> list[str]:
    """The test ids ``--collect-only -q`` listed."""
    return [line for line in output.splitlines() if "::" in line]


def collect_as_contributor(tmp_path: Path, *paths: str) -> tuple[list[str], int]:
    """The test ids a contributor's pytest would run in ``paths``, and how many it left out."""
    output = collect(tmp_path, NOT_ROOT, *paths)
    left = re.search(r"\((\d+) deselected\)", output)
    return listed_ids(output), int(left.group(1)) if left else 0


def test_tests_that_ask_for_a_pool_through_a_fixture_are_left_out(tmp_path):
    """test_bad_input's rows ask for the real pools through a module fixture, test_concurrency's
    and test_secrets' flows through parametrized ones: a contributor's pytest used to collect
    them, and they failed as the bring-up scripts refuse a user who is not root."""
    ran, left = collect_as_contributor(tmp_path, "tests/reliability/test_bad_input.py",
                                       "tests/reliability/test_concurrency.py",
                                       "tests/reliability/test_secrets.py")
    assert not [test for test in ran if "test_concurrency.py" in test
                or "test_bad_input_gets_one_clear_error" in test
                or ("test_secrets.py" in test and "[" in test)], ran
    assert left >= 200, left
    # what needs no pool still runs
    rows = "tests/reliability/test_bad_input.py::test_the_rows_are_distinct_and_each_names_a_field"
    assert rows in ran, ran


#: The plugin that plays root, as CI runs: the pools' tests are collected.
ROOT = "import os\nos.geteuid = lambda: 0\n"


def collect_part(tmp_path: Path, part: str | None, *paths: str) -> list[str]:
    """The test ids of ``--part part`` (None: the whole suite) in ``paths``, as root
    collects them."""
    return listed_ids(collect(tmp_path, ROOT, *(("--part", part) if part else ()), *paths))


def test_the_parallel_suite_splits_the_pools_tests_from_the_rest(tmp_path):
    """``bash ci/test.sh`` (``ci/parts.sh``) runs ``--part pools`` (every test that uses
    a real pool, and the docs' examples, which hold fixed ports) one at a time beside
    ``--part rest`` under pytest-xdist. It used pytest-xdist's ``--dist loadgroup``, which
    grouped nothing: xdist's workers see ``--dist`` as ``no``, and with pytest 9.2 xdist's
    group suffix no longer reaches the test ids (pytest-dev/pytest-xdist#1386); the pools'
    tests ran on every worker at once (a run failed in three SGE tests together)."""
    paths = ("tests/batch/test_sge.py", "tests/reliability/test_concurrency.py",
             "tests/docs/test_docs_examples.py", "tests/test_structure.py")
    pools = collect_part(tmp_path, "pools", *paths)
    rest = collect_part(tmp_path, "rest", *paths)
    assert not set(pools) & set(rest)
    assert set(pools) | set(rest) == set(collect_part(tmp_path, None, *paths))
    for must in ("tests/batch/test_sge.py::test_doctor_checks_the_real_cell",
                 "tests/reliability/test_concurrency.py::test_clusters_on_one_pool_never_touch"
                 "_each_others_jobs[slurm]"):
        assert must in pools, pools
    assert [i for i in pools if "test_docs_examples.py" in i]
    assert not [i for i in rest if "test_docs_examples.py" in i or "[slurm]" in i
                or "[htcondor]" in i or "test_doctor_checks_the_real_cell" in i], rest
    assert [i for i in rest if "test_structure.py" in i]
    assert not [i for i in pools if "test_structure.py" in i]


#: The plugin that says, once pytest is configured, how it handles Ctrl-C.
REPORT_SIGINT = """\
import signal


def pytest_sessionstart(session):
    print("SIGINT ignored:", signal.getsignal(signal.SIGINT) == signal.SIG_IGN)
"""


def test_a_pytest_started_with_ctrl_c_ignored_hands_it_on(tmp_path):
    """ci/test.sh runs the pools' part as a background job, which bash starts with Ctrl-C
    ignored, as pytest-xdist does its workers; an ignored signal stays ignored in every
    program a test starts, so the Ctrl-C tests' scripts would never see it. Any pytest of
    this suite that starts so gets Python's own handler back."""
    (tmp_path / "report_sigint.py").write_text(REPORT_SIGINT)
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "report_sigint",
         "--collect-only", "-q", "-s", "tests/test_structure.py"], cwd=REPO,
        capture_output=True, text=True, timeout=120,
        env={**os.environ, "PYTHONPATH": str(tmp_path)},
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SIGINT ignored: False" in result.stdout, result.stdout
