"""The job script names its worker from the job id as the pool manager expects
(:func:`hybrid.batch.jobs.worker_name_suffix`), under bash and dash, and starts no process
for it when the id needs no change (the ids Slurm, HTCondor and Grid Engine give: a ``tr``
per job was part of what each worker's start cost while many start on one node).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from hybrid.batch import get_system
from hybrid.batch.jobs import worker_name_suffix
from tests.batch.test_cli_and_templates import GOLDEN_STAGING, htcondor_job

IDS = ["4242", "17.3", "123456_7", "1234[5].pbs-server", "job id/with space;$(x)"]


def _suffix_block() -> str:
    """The lines of a rendered job script that set ``hybrid_suffix``."""
    script = get_system("htcondor").render_wrapper(htcondor_job(), GOLDEN_STAGING)
    lines = script.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("case $HYBRID_JOB_ID"))
    end = next(i for i in range(start, len(lines)) if lines[i] == "esac")
    return "\n".join(lines[start:end + 1])


@pytest.mark.parametrize("shell", ["bash", "dash"])
def test_the_worker_name_suffix_is_the_managers_and_costs_no_process_for_plain_ids(
        shell: str, tmp_path: Path) -> None:
    shims = tmp_path / "bin"
    shims.mkdir()
    calls = tmp_path / "tr-calls"
    (shims / "tr").write_text(f'#!/bin/sh\necho x >> {calls}\nexec {shutil.which("tr")} "$@"\n')
    (shims / "tr").chmod(0o755)
    block = _suffix_block()
    env = {**os.environ, "PATH": f"{shims}{os.pathsep}{os.environ['PATH']}", "LC_ALL": "C"}
    for job_id in IDS:
        calls.unlink(missing_ok=True)
        result = subprocess.run([shell, "-c", f'{block}\nprintf "%s" "$hybrid_suffix"'],
                                env={**env, "HYBRID_JOB_ID": job_id}, capture_output=True,
                                timeout=30)
        assert result.returncode == 0, result.stderr
        assert result.stdout.decode() == worker_name_suffix(job_id), job_id
        plain = worker_name_suffix(job_id) == job_id
        assert calls.exists() is not plain, (job_id, "a tr process" if plain else "no tr")
