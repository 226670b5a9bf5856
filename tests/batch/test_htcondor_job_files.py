"""HTCondor's three ways of getting a job its files (``job_files``): spooled through the
schedd and transferred, transferred by the local schedd from the staging directory (no
spooling), or read in place from a staging directory on a shared filesystem.

The transfer and shared modes run on the REAL pool: its shared directory
(``ci/htcondor/up.sh``) is the same directory at the same path on this host and inside the
pool, as a site's ``/home`` is on its submit and execute nodes. The schedd runs no job as
root, so the cluster there is run by the pool's job user, as a site's user runs it
(``benchmarks.realpools.as_pool_user``).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import dask
import htcondor2
import pytest

from benchmarks import realpools
from hybrid import HybridCluster
from hybrid.batch import JobState, WorkerJob, get_system
from hybrid.errors import ConfigurationError
from hybrid.pools import PoolSpec
from hybrid.worker import Connection, TLSFiles

REPO = Path(__file__).resolve().parents[2]
STAGING = Path("/work/alice/hybrid-jobs/demo-cpu-0123abcd")


def tls_job() -> WorkerJob:
    spec = PoolSpec.build("cpu", "htcondor", check_paths=False, memory="1 GiB")
    return WorkerJob("demo", spec, Connection("tls://10.0.0.1:8786",
                                              TLSFiles("/x/ca", "/x/cert", "/x/key")))


def test_shared_mode_reads_the_files_in_place_without_transfer() -> None:
    system = get_system("htcondor", job_files="shared")
    description = system.render(tls_job(), STAGING, 3)
    submit = htcondor2.Submit(description)  # the real bindings parse it
    assert submit["should_transfer_files"] == "NO"
    assert submit["initialdir"] == str(STAGING)
    assert submit["executable"] == f"{STAGING}/worker.sh"
    for key in ("transfer_input_files", "transfer_executable", "when_to_transfer_output"):
        assert key not in submit.keys(), key
    wrapper = system.render_wrapper(tls_job(), STAGING)
    assert f"--tls-ca-file {STAGING}/ca.pem" in wrapper
    assert f"--tls-key {STAGING}/key.pem" in wrapper
    # HTCondor writes the job's output into the staging directory, where hybrid reads it
    assert system.log_path(STAGING, "12.3") == STAGING / "worker-12.3.log"


def test_spool_mode_ships_the_files_with_the_job() -> None:
    system = get_system("htcondor", job_files="spool")
    submit = htcondor2.Submit(system.render(tls_job(), STAGING, 3))
    assert submit["should_transfer_files"] == "YES"
    assert submit["transfer_input_files"] == ",".join(
        f"{STAGING}/{name}" for name in ("ca.pem", "cert.pem", "key.pem"))
    assert "--tls-ca-file ca.pem" in system.render_wrapper(tls_job(), STAGING)
    assert system.log_path(STAGING, "12.3") is None


def test_transfer_mode_ships_the_files_from_the_staging_directory() -> None:
    system = get_system("htcondor", job_files="transfer")
    spooled = get_system("htcondor", job_files="spool")
    # the same description as a spooled one: the difference is submit(spool=False), no upload
    assert system.render(tls_job(), STAGING, 3) == spooled.render(tls_job(), STAGING, 3)
    submit = htcondor2.Submit(system.render(tls_job(), STAGING, 3))
    assert submit["should_transfer_files"] == "YES"
    assert submit["initialdir"] == str(STAGING)
    assert submit["transfer_input_files"] == ",".join(
        f"{STAGING}/{name}" for name in ("ca.pem", "cert.pem", "key.pem"))
    # the job reads the copies in its scratch directory
    assert "--tls-key key.pem" in system.render_wrapper(tls_job(), STAGING)
    assert system.ships_files_for(STAGING)
    # HTCondor brings the job's output back into the staging directory when it ends
    assert system.log_path(STAGING, "12.3") == STAGING / "worker-12.3.log"


def test_auto_reads_in_place_only_under_a_declared_shared_directory(tmp_path) -> None:
    shared = get_system("htcondor", shared_directories=[str(tmp_path)])
    elsewhere = Path("/var/tmp/not-declared/staging")
    assert shared.job_files_mode(elsewhere) == "spool"
    # root's jobs are refused by every schedd, so its files are never read in place
    expected = "spool" if os.geteuid() == 0 else "shared"
    assert shared.job_files_mode(tmp_path / "jobs" / "x") == expected
    assert get_system("htcondor").job_files_mode(tmp_path / "x") == "spool"


@pytest.mark.parametrize("options, field", [
    ({"job_files": "sometimes"}, "system_options.job_files"),
    ({"shared_directories": ["relative/dir"]}, "system_options.shared_directories"),
    ({"shared_directories": "/home"}, "system_options.shared_directories"),
])
def test_bad_job_file_settings_name_the_field(options, field, staging) -> None:
    with HybridCluster(scheduler_address=None) as cluster, \
            pytest.raises(ConfigurationError, match=rf"add_pool\('c'\)\.{field}"):
        cluster.add_pool("c", "htcondor", system_options=options)
    assert not staging.exists() or not any(staging.iterdir())


@pytest.mark.parametrize("mode", ["shared", "transfer"])
def test_modes_without_spool_are_refused_where_the_jobs_could_not_read_the_files(
        staging, mode) -> None:
    if os.geteuid() != 0:  # the condition is root's; a contributor's run checks the wording
        assert get_system("htcondor").files_problem(mode) is None
        return
    with HybridCluster(scheduler_address=None) as cluster, \
            pytest.raises(ConfigurationError, match=r"job_files.*running as root.*spool"):
        cluster.add_pool("c", "htcondor", system_options={"job_files": mode})
    # the system object given directly refuses at submission, before writing anything
    system = get_system("htcondor", job_files=mode)
    with pytest.raises(ConfigurationError, match="job-files"):
        system.submit(tls_job(), staging / "never", 1)
    assert not (staging / "never").exists()


@pytest.mark.parametrize("where", [{"schedd_name": "schedd@elsewhere"},
                                   {"collector": "cm.example.org"}])
def test_transfer_mode_is_refused_for_a_schedd_found_elsewhere(staging, where) -> None:
    """The schedd reads the files from this node's staging directory: only the local one can."""
    with HybridCluster(scheduler_address=None) as cluster, pytest.raises(
            ConfigurationError, match=r"system_options\.job_files = 'transfer'.*this node's "
            r"own schedd.*Leave schedd_name and collector unset"):
        cluster.add_pool("c", "htcondor", system_options={"job_files": "transfer", **where})
    assert not staging.exists() or not any(staging.iterdir())
    # given in hybrid.yaml, the schedd's name still rules transfer out, at add_pool
    with dask.config.set({"hybrid.batch.htcondor.schedd-name": "schedd@elsewhere"}), \
            HybridCluster(scheduler_address=None) as cluster, pytest.raises(
                ConfigurationError, match="this node's own schedd"):
        cluster.add_pool("c", "htcondor", system_options={"job_files": "transfer"})
    # and the system object given directly refuses at submission, before writing anything
    system = get_system("htcondor", job_files="transfer", **where)
    with pytest.raises(ConfigurationError, match=r"job-files.*this node's own schedd"):
        system.submit(tls_job(), staging / "never", 1)
    assert not (staging / "never").exists()


def _cluster_as_pool_user(job_files: str, *scenario: str) -> dict:
    """What ``tests.batch._pool_user_cluster`` saw, run by the pool's job user from a staging
    directory in the pool's shared filesystem."""
    home = realpools.shared_home()
    try:
        staging = home / "jobs"
        result = subprocess.run(
            realpools.as_pool_user([sys.executable, "-m", "tests.batch._pool_user_cluster",
                                    str(staging), str(realpools.shared_dir()),
                                    job_files, *scenario], home),
            cwd=REPO, capture_output=True, text=True, timeout=280)
        assert result.returncode == 0, result.stderr[-4000:]
        return json.loads(result.stdout.strip().splitlines()[-1])
    finally:
        shutil.rmtree(home, ignore_errors=True)


@pytest.mark.htcondor
@pytest.mark.timeout(300)
@pytest.mark.parametrize("job_files", ["auto", "shared"])
def test_a_user_on_a_shared_filesystem_runs_workers_that_read_their_files_in_place(
        htcondor_pool, job_files) -> None:
    seen = _cluster_as_pool_user(job_files)
    uid, _ = realpools.pool_user()
    assert seen["sum"] == 6 and seen["uid_here"] == uid and seen["uid"] == [uid]
    directory = seen["staging"]
    # the workers ran in the staging directory itself and read the TLS files there
    assert seen["cwd"] == [directory]
    for argv in seen["argv"]:
        assert argv[argv.index("--tls-key") + 1] == f"{directory}/key.pem"
    # nothing was transferred: the schedd says so for every job
    assert [ad["ShouldTransferFiles"] for ad in seen["ads"]] == ["NO", "NO"]
    assert {ad["Iwd"] for ad in seen["ads"]} == {directory}
    # the files stayed private and the user's own
    assert seen["files"]["key.pem"] == [0o600, uid]
    assert seen["files"]["worker.sh"] == [0o700, uid]
    # the job's output is readable where hybrid looks for it, while the job runs
    assert seen["log"].startswith(directory) and seen["log_text"] is not None
    assert len(seen["logs_while_running"]) == 2
    # close() removed every job and the staging directory
    assert seen["left"] == 0 and seen["staging_left"] is False


@pytest.mark.htcondor
@pytest.mark.timeout(300)
def test_a_user_of_the_local_schedd_gets_the_files_transferred_without_spooling(
        htcondor_pool) -> None:
    seen = _cluster_as_pool_user("transfer")
    uid, _ = realpools.pool_user()
    assert seen["sum"] == 6 and seen["uid_here"] == uid and seen["uid"] == [uid]
    directory = seen["staging"]
    # each worker ran in its own scratch directory, on the copies HTCondor transferred there
    assert len(seen["cwd"]) == 2 and directory not in seen["cwd"]
    for argv in seen["argv"]:
        assert argv[argv.index("--tls-key") + 1] == "key.pem"
    assert [ad["ShouldTransferFiles"] for ad in seen["ads"]] == ["YES", "YES"]
    # submitted from the staging directory, nothing uploaded into the schedd's spool (a
    # spooled job's Iwd is moved into the spool, the submitter's kept as SUBMIT_Iwd)
    assert {ad["Iwd"] for ad in seen["ads"]} == {directory}
    assert not any("SUBMIT_Iwd" in ad for ad in seen["ads"])
    assert seen["files"]["key.pem"] == [0o600, uid]
    assert seen["files"]["worker.sh"] == [0o700, uid]
    # the output comes back into the staging directory when a job ends, where hybrid looks
    assert seen["log"].startswith(directory) and seen["log_text"] is None
    assert seen["logs_while_running"] == []
    assert len(seen["logs_after_one_ended"]) == 1
    assert seen["left"] == 0 and seen["staging_left"] is False


@pytest.mark.htcondor
@pytest.mark.timeout(300)
@pytest.mark.parametrize("job_files", ["transfer", "shared"])
def test_a_job_that_fails_without_spooling_is_explained_with_its_log(
        htcondor_pool, job_files) -> None:
    """Without the spool, a failed job's output is in the staging directory (brought back by
    HTCondor in transfer mode), and the error the user gets quotes it."""
    seen = _cluster_as_pool_user(job_files, "failing")
    assert seen["error"] is not None and "gave up" in seen["error"], seen
    assert "Its log (" in seen["error"], seen["error"]
    assert "/nonexistent/hybrid-test-python" in seen["error"].split("Its log (", 1)[1]
    assert seen["left"] == 0


class RecordingScheddDouble:
    """A TEST DOUBLE of ``htcondor2.Schedd`` that only counts ``reschedule()`` calls (the rate
    limit is hybrid's own logic; the real schedd's answer to a reschedule is measured by
    ``python -m benchmarks --only reschedule``)."""

    def __init__(self) -> None:
        self.calls = 0

    def reschedule(self) -> None:
        self.calls += 1


def test_reschedule_after_submit_is_rate_limited_per_schedd(monkeypatch) -> None:
    from hybrid.batch import htcondor

    monkeypatch.setattr(htcondor, "_rescheduled", {})
    schedd = RecordingScheddDouble()
    limited = get_system("htcondor", reschedule_interval="1 hour")
    for _ in range(5):  # an adaptive pool submitting again and again
        limited._reschedule(schedd)
    assert schedd.calls == 1
    # another schedd is asked on its own account; 0 turns it off
    get_system("htcondor", schedd_name="other", reschedule_interval="1 hour")._reschedule(schedd)
    assert schedd.calls == 2
    get_system("htcondor", schedd_name="third", reschedule_interval=0)._reschedule(schedd)
    assert schedd.calls == 2
    # once the interval passed, the next submission asks again
    monkeypatch.setattr(htcondor, "_rescheduled", {k: v - 3601 for k, v in
                                                   htcondor._rescheduled.items()})
    limited._reschedule(schedd)
    assert schedd.calls == 3


def test_an_undefined_reason_in_a_job_ad_is_no_reason_not_the_text_2() -> None:
    """A site's periodic_hold whose reason does not evaluate leaves ``HoldReason``
    undefined; the bindings give ``classad2.Value.Undefined``, an int enum that is true and
    reads "2": every view showed the hold reason "2" (an audit). Real ClassAds."""
    import classad2

    from hybrid.batch.htcondor import condor_state

    held = classad2.ClassAd({"JobStatus": 5, "HoldReasonCode": 3})
    held["HoldReason"] = classad2.ExprTree("undefined")
    assert condor_state(held) == (JobState.held, "held, no reason given")
    idle = classad2.ClassAd({"JobStatus": 1})
    idle["LastRejMatchReason"] = classad2.ExprTree("undefined")
    assert condor_state(idle) == (JobState.pending, None)
    removed = classad2.ClassAd({"JobStatus": 3})
    removed["RemoveReason"] = classad2.ExprTree("undefined")
    assert condor_state(removed, in_queue=False) == (JobState.removed, "removed")
    named = classad2.ClassAd({"JobStatus": 5, "HoldReason": " over the memory policy "})
    assert condor_state(named) == (JobState.held, "over the memory policy")
