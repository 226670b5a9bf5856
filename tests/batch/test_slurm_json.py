"""Slurm's queue read whole on the REAL Slurm: a job name and a pending reason with spaces.

``squeue --json`` (Slurm 21.08 and later) and, for older Slurm, the text readers
(``squeue --format`` with a separator, ``scontrol show job --oneliner`` split at its ``Key=``
words). The reason is a real one with spaces: the job waits in a partition of its own that
no longer admits its account ("Job's account not known, so it can't use this partition
(...)"); the partition is made for the test at run time (``scontrol create``), so no other
job of the shared pool sees it, and deleted at the end.
"""

from __future__ import annotations

import json
import socket
import subprocess
import uuid

import pytest

from hybrid.batch import JobState
from hybrid.batch.jobs import DEFAULT_TAG
from hybrid.batch.slurm import Slurm, scontrol_record, squeue_json
from tests.batch.test_real_pools import wait_for

pytestmark = pytest.mark.slurm

NAME = "hybrid job name with spaces"


def _run(*argv: str) -> str:
    return subprocess.run(argv, capture_output=True, text=True, check=True).stdout


@pytest.fixture
def pending_with_spaces(slurm_cluster):
    """Two held array tasks named :data:`NAME`, pending with a reason that has spaces."""
    partition = f"hybrid-spaces-{uuid.uuid4().hex[:8]}"
    cluster = f"spaces-{uuid.uuid4().hex[:6]}"
    _run("scontrol", "create", f"PartitionName={partition}", f"Nodes={socket.gethostname()}",
         "State=UP", "MaxTime=INFINITE")
    array = None
    try:
        array = _run("sbatch", "--parsable", "--hold", f"--partition={partition}",
                     f"--job-name={NAME}", "--array=1-2", "--output=/dev/null",
                     f"--comment={DEFAULT_TAG}:{cluster}:cpu:tcp://127.0.0.1:9",
                     "--wrap=true").strip()
        _run("scontrol", "update", f"PartitionName={partition}", "AllowAccounts=hybrid-nobody")
        _run("scontrol", "release", array)

        def described() -> str:
            jobs = json.loads(_run("squeue", "--json"))["jobs"]
            return next((j["state_description"] for j in jobs
                         if j["array_job_id"] == int(array) and j["state_description"]), "")

        wait_for(lambda: " " in described(), 60, "Slurm to give the held job its reason")
        yield array, cluster, described()
    finally:
        if array:
            subprocess.run(["scancel", array], capture_output=True)
            wait_for(lambda: array not in _run("squeue", "--noheader", "--format=%F"), 60,
                     "the cancelled array to leave the queue")
        subprocess.run(["scontrol", "delete", f"PartitionName={partition}"],
                       capture_output=True)


def test_squeue_json_reads_name_and_reason_whole(pending_with_spaces) -> None:
    array, cluster, reason = pending_with_spaces
    assert "partition" in reason and " " in reason
    ids = [f"{array}_1", f"{array}_2"]

    jobs = {job.job_id: job for job in squeue_json(_run("squeue", "--json"))}
    assert [jobs[i].name for i in ids] == [NAME, NAME]
    assert [jobs[i].reason for i in ids] == [reason, reason]

    slurm = Slurm()
    statuses = slurm.query(job_ids=ids, history=True)
    assert slurm._json is True  # this Slurm (22.05) offers --json: the JSON reader ran
    assert [(s.job_id, s.state, s.reason, s.cluster, s.pool) for s in statuses] == [
        (i, JobState.pending, reason, cluster, "cpu") for i in ids]


def test_text_readers_for_older_slurm_read_name_and_reason_whole(pending_with_spaces) -> None:
    array, cluster, reason = pending_with_spaces
    ids = [f"{array}_1", f"{array}_2"]

    slurm = Slurm()
    slurm._json = False  # as on a Slurm without --json
    statuses = slurm.query(job_ids=ids)
    assert [(s.state, s.reason, s.cluster) for s in statuses] == [
        (JobState.pending, reason, cluster)] * 2

    line = _run("scontrol", "show", "job", "--oneliner", array).splitlines()[0]
    assert f"JobName={NAME} " in line  # the case that splitting on spaces cut
    job = scontrol_record(line)
    assert job is not None and job.name == NAME and job.state is JobState.pending
    assert job.comment == f"{DEFAULT_TAG}:{cluster}:cpu:tcp://127.0.0.1:9"
    assert job.reason == reason.replace(" ", "_")  # scontrol writes a reason's spaces as _


@pytest.mark.parametrize(("script", "ended"), [
    ("/nonexistent/python3 -V", "exit code 127"),  # a python that is not there
    ("kill -KILL $$", "signal 9"),                  # the memory limit's way
])
def test_a_failed_job_says_how_it_ended_in_both_readers(slurm_cluster, script, ended) -> None:
    """``squeue --json`` gave only "NonZeroExitCode" (its ``exit_code`` is the raw wait
    status on 22.05), so the exit-code hints never showed on Slurm (a report); scontrol's
    ``ExitCode=127:0`` was quoted whole, which no hint matched either. (The text reader of
    a Slurm without --json has no exit code in ``squeue``'s fields: it says the reason.)"""
    from hybrid.manager import EXIT_HINTS

    cluster = f"ended-{uuid.uuid4().hex[:6]}"
    job = _run("sbatch", "--parsable", "--output=/dev/null", "--array=1-1",
               f"--comment={DEFAULT_TAG}:{cluster}:cpu:tcp://127.0.0.1:9",
               f"--wrap={script}").strip()
    task = f"{job}_1"
    try:
        slurm = Slurm()
        wait_for(lambda: [s.state for s in slurm.query(job_ids=[task])] == [JobState.failed],
                 60, "the job to fail")
        [status] = slurm.query(job_ids=[task])
        assert status.reason is not None and status.reason.endswith(f"({ended})"), status
        # scontrol, which reads the tasks that left the queue on a Slurm without --json
        line = _run("scontrol", "show", "job", "--oneliner", job).splitlines()[0]
        record = scontrol_record(line)
        assert record is not None and record.reason is not None
        assert record.reason.endswith(f"({ended})"), record
        code = ended.rsplit(" ", 1)[-1]
        assert code in EXIT_HINTS  # what describe_end then adds
    finally:
        subprocess.run(["scancel", job], capture_output=True)
