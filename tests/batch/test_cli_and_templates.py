"""Submit-node commands against the REAL Slurm, HTCondor/Slurm golden renderings, ClassAd
quoting checked by the REAL schedd, and adaptive reporting of jobs stuck in the queue."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import dask
import htcondor2
import pytest

from hybrid import HybridCluster
from hybrid.batch import WorkerJob, get_system
from hybrid.errors import TemplateError
from hybrid.pools import PoolSpec
from hybrid.templates import classad_string
from hybrid.worker import Connection, TLSFiles
from tests.batch.test_real_pools import slurm_jobs, wait_for

pytestmark = pytest.mark.timeout(240)

GOLDEN = Path(__file__).with_name("golden")
GOLDEN_STAGING = Path("/home/alice/.cache/hybrid/jobs/demo-gpu-0123abcd")
HYBRID = [sys.executable, "-m", "hybrid.cli"]


def golden_job(**changes) -> WorkerJob:
    """A GPU pool behind a gateway's proxy (TLS, SNI), every kind of option set."""
    options = dict(cores=4, memory="16 GiB", gpus=1, walltime="05:59", queue="gpuq",
                   env={"OE_LICENSE": "/secrets/oe"}, job_extra_directives=["--exclusive"],
                   job_script_prologue=["module load cuda"], python="/opt/venv/bin/python",
                   worker_port="10000:10070", death_timeout=60, lease="24h")
    options.update(changes)
    system = options.pop("system", "slurm")
    spec = PoolSpec.build("gpu", system, **options)
    connection = Connection("tls://gateway.example.org:8786",
                            TLSFiles("/x/ca", "/x/cert", "/x/key"), sni="daskgateway-demo")
    return WorkerJob("demo", spec, connection)


def htcondor_job() -> WorkerJob:
    return golden_job(system="htcondor", job_extra_directives=["+Requirements = True"])


@pytest.mark.parametrize("name, render", [
    ("slurm_gpu.sh", lambda: get_system("slurm").render(golden_job(), GOLDEN_STAGING, 4)),
    ("htcondor_gpu.sub", lambda: get_system("htcondor").render(htcondor_job(),
                                                               GOLDEN_STAGING, 4)),
    ("htcondor_worker.sh", lambda: get_system("htcondor").render_wrapper(htcondor_job(),
                                                                         GOLDEN_STAGING)),
])
def test_rendering_matches_golden_file(name, render) -> None:
    """The golden files are reviewed by hand: a change to a template shows up here."""
    assert render() == (GOLDEN / name).read_text()


def test_htcondor_submit_description_parses_with_the_real_bindings() -> None:
    text = get_system("htcondor").render(htcondor_job(), GOLDEN_STAGING, 4)
    submit = htcondor2.Submit(text)
    assert submit["request_gpus"] == "1"
    assert submit["request_cpus"] == "4"
    assert submit["request_memory"] == str(16 * 1024)
    assert submit["My.HybridCluster"] == '"demo"'
    # the lease, and the pool's wall time (05:59) for a running job
    assert submit["periodic_remove"] == ("((time() - QDate) > 86400) || (JobStatus == 2 && "
                                         "(time() - JobCurrentStartDate) > 21540)")


@pytest.mark.htcondor
def test_classad_strings_arrive_exactly_in_the_real_schedd(htcondor_pool, tmp_path) -> None:
    value = 'say "hi" (HOME) \'single\' ; & | <x> `id` #not-a-comment  two  spaces'
    description = (f"executable = /bin/true\ninitialdir = {tmp_path}\nhold = true\n"
                   f"My.HybridT = {classad_string(value)}\nMy.HybridCluster = \"quote-test\"\n"
                   "queue 1\n")
    schedd = htcondor2.Schedd()
    result = schedd.submit(htcondor2.Submit(description))
    try:
        ads = schedd.query(constraint=f"ClusterId == {result.cluster()}",
                           projection=["HybridT"])
        assert ads[0]["HybridT"] == value
    finally:
        schedd.act(htcondor2.JobAction.Remove, str(result.cluster()))
    for bad in ("two\nlines", "$(HOME)", "back\\slash"):
        with pytest.raises(TemplateError, match="cannot carry exactly"):
            classad_string(bad)


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*HYBRID, *args], capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("command", ["render", "submit", "status", "cancel", "gc", "demo",
                                     "admin", "doctor", "gateway"])
def test_every_command_has_help(command) -> None:
    result = run_cli(command, "--help")
    assert result.returncode == 0, result.stderr
    assert "Usage:" in result.stdout


@pytest.mark.slurm
def test_submit_status_cancel_gc_on_the_real_slurm(slurm_cluster, staging) -> None:
    env_staging = {"DASK_HYBRID__BATCH__STAGING_DIRECTORY": str(staging)}
    os.environ.update(env_staging)
    try:
        # a scheduler that is gone: nothing listens on port 9
        submitted = run_cli("submit", "--system", "slurm", "--scheduler", "tcp://127.0.0.1:9",
                            "--cluster", "cli-gone", "--count", "3", "--walltime", "00:05",
                            "--death-timeout", "120", "--json")
        assert submitted.returncode == 0, submitted.stderr
        ids = json.loads(submitted.stdout)["job_ids"]
        assert len(ids) == 3 and len({i.split("_")[0] for i in ids}) == 1
        assert sorted(slurm_jobs("cli-gone")) == sorted(ids)

        status = json.loads(run_cli("status", "--system", "slurm", "--cluster", "cli-gone",
                                    "--json").stdout)
        assert sorted(j["job_id"] for j in status if j["state"] in ("pending", "running")) \
            == sorted(ids)
        assert {j["scheduler"] for j in status} == {"tcp://127.0.0.1:9"}

        cancelled = run_cli("cancel", "--system", "slurm", ids[0], "--json")
        assert json.loads(cancelled.stdout) == {"removed": [ids[0]]}
        wait_for(lambda: ids[0] not in slurm_jobs("cli-gone"), 30, "the cancelled job to go")
        assert sorted(slurm_jobs("cli-gone")) == sorted(ids[1:])

        # the queue's jobs by default; the cancelled one, which Slurm still reports for
        # MinJobAge, with --all
        def ended() -> list[str]:
            every = json.loads(run_cli("status", "--system", "slurm", "--cluster", "cli-gone",
                                       "--all", "--json").stdout)
            return [j["job_id"] for j in every if j["state"] in ("removed", "finished")]

        wait_for(lambda: ended() == [ids[0]], 30, "Slurm to report the job it cancelled")
        listed = run_cli("status", "--system", "slurm", "--cluster", "cli-gone").stdout
        assert ids[0] not in listed and all(i in listed for i in ids[1:]), listed
        assert "(1 ended job(s) of ours not shown: --all lists them)" in listed
        assert ids[0] in run_cli("status", "--system", "slurm", "--cluster", "cli-gone",
                                 "--all").stdout

        stranger = run_cli("cancel", "--system", "slurm", "999999_1")
        assert stranger.returncode != 0 and "not jobs of ours" in stranger.stderr

        dry = json.loads(run_cli("gc", "--system", "slurm", "--dry-run", "--json").stdout)
        assert sorted(j["job_id"] for j in dry["orphans"]) == sorted(ids[1:])
        assert sorted(slurm_jobs("cli-gone")) == sorted(ids[1:])  # dry run removed nothing

        collected = json.loads(run_cli("gc", "--system", "slurm", "--json").stdout)
        assert sorted(j["job_id"] for j in collected["orphans"]) == sorted(ids[1:])
        wait_for(lambda: slurm_jobs("cli-gone") == [], 30, "gc to empty the queue")
        assert not any(staging.glob("cli-gone-*"))  # its staging directory went too
    finally:
        for name in env_staging:
            os.environ.pop(name, None)
        subprocess.run(["scancel", *slurm_jobs("cli-gone")], capture_output=True)


def test_bad_cli_input_is_a_one_line_error() -> None:
    result = run_cli("render", "--system", "slurm", "--memory", "8")
    assert result.returncode != 0
    assert "--memory = '8' is not valid" in result.stderr
    result = run_cli("submit", "--system", "slurm", "--scheduler", "tls://x:1")
    assert result.returncode != 0 and "--tls-ca" in result.stderr


@pytest.mark.slurm
def test_adaptive_reports_a_job_stuck_in_the_queue_and_does_not_resubmit(
        slurm_cluster, staging) -> None:
    from tests.batch._tasks import pack

    with dask.config.set({"hybrid.batch.stuck-timeout": "2s"}), HybridCluster() as cluster:
        pool = cluster.add_pool("cpu", "slurm", nanny=False, walltime="00:05",
                                job_extra_directives=["--begin=now+1hour"])
        adaptive = cluster.adapt(pool="cpu", minimum=0, maximum=1, interval="0.5s")
        with cluster.get_client() as client:
            future = client.submit(pack, 1)
            # Slurm sets the reason a while after the job is queued: the report takes it
            # when it arrives (it was "no reason given yet" before)
            wait_for(lambda: any("BeginTime" in (r or "") for r in pool.stuck.values()), 60,
                     "the stuck job to be reported with Slurm's reason")
            steps = adaptive.steps
            wait_for(lambda: adaptive.steps >= steps + 4, 30, "four more adaptive steps")
            assert pool.submit_calls == 1  # counted toward the target, not resubmitted
            assert len(pool.stuck) == 1
            del future
    assert slurm_jobs(cluster.name) == []


@pytest.mark.parametrize("system", ["sge", "htcondor", "slurm"])
def test_a_template_that_cannot_render_is_an_error_of_add_pool(system: str,
                                                               tmp_path: Path) -> None:
    """A user's own template is rendered when the pool is added: its error comes from
    ``add_pool`` (no pool, no staging directory, nothing submitted), not from a later
    ``scale``."""
    templates = tmp_path / "templates"
    templates.mkdir()
    name = {"sge": "sge.sh.j2", "htcondor": "htcondor.sub.j2", "slurm": "slurm.sh.j2"}[system]
    (templates / name).write_text("{{ no_such_value }}\n")
    staging = tmp_path / "staging"
    with dask.config.set({"hybrid.templates.directory": str(templates),
                          "hybrid.batch.staging-directory": str(staging)}), \
            HybridCluster(name=f"tpl-{system}", dashboard_address=None) as cluster:
        with pytest.raises(TemplateError, match="no_such_value"):
            cluster.add_pool("cpu", system)
        assert "cpu" not in cluster.manager.pools
    assert not staging.exists() or list(staging.iterdir()) == []


def test_a_user_template_with_a_syntax_error_is_a_clear_error_of_add_pool(tmp_path: Path) -> None:
    """Jinja's own syntax error becomes hybrid's: the file, the line, and the fix."""
    templates = tmp_path / "templates"
    templates.mkdir()
    (templates / "slurm.sh.j2").write_text("#!/bin/sh\n{% if %}\n")
    with dask.config.set({"hybrid.templates.directory": str(templates)}), \
            HybridCluster(name="tpl-syntax", dashboard_address=None) as cluster:
        with pytest.raises(TemplateError, match=r"slurm\.sh\.j2, line 2\).*unset "
                                                r"hybrid\.templates\.directory"):
            cluster.add_pool("cpu", "slurm")
        assert "cpu" not in cluster.manager.pools


@pytest.mark.parametrize("line", ["--exclusive", "--gres=gpu:a100:1", "--begin=now+60",
                                  "--time-min=10", "--constraint=avx2", "--mem-bind=local"])
def test_slurm_directives_hybrid_does_not_set_go_through(line) -> None:
    """(Refusing ``--time``, ``--mem``, ``--export``... must not catch their neighbours.)"""
    from hybrid.pools import PoolSpec

    spec = PoolSpec.build("p", "slurm", job_extra_directives=[line])
    assert spec.job_extra_directives == (line,)


def test_render_shows_each_submission_of_a_split_request() -> None:
    """A request beyond ``max-array-size`` goes out as several arrays (Slurm, Grid Engine,
    PBS): the printed script shows each different one, as ``submit`` sends them."""
    rendered = run_cli("render", "--system", "slurm", "--count", "2500", "--scheduler",
                       "tcp://127.0.0.1:8786").stdout
    assert rendered.count("#SBATCH --array=1-1000\n") == 1
    assert rendered.count("#SBATCH --array=1-500\n") == 1
    assert ("# === submissions 1-2 of 3: 1000 worker(s) each "
            "(hybrid.batch.slurm.max-array-size) ===\n#!/bin/bash\n") in rendered
    assert ("# === submission 3 of 3: 500 worker(s) "
            "(hybrid.batch.slurm.max-array-size) ===\n#!/bin/bash\n") in rendered
    single = run_cli("render", "--system", "slurm", "--count", "1000", "--scheduler",
                     "tcp://127.0.0.1:8786").stdout
    assert single.startswith("#!/bin/bash\n") and "===" not in single


def test_system_options_on_the_command_line_take_what_a_dask_variable_takes() -> None:
    """``--system-option`` gave every value as text: no boolean, list or mapping setting could
    be set (``accounting=False`` was refused as "True or False"), and ``None`` became a
    parallel environment named None. Values are now read as Dask reads ``DASK_`` values."""
    off = run_cli("render", "--system", "sge", "--system-option", "accounting=False")
    on = run_cli("render", "--system", "sge", "--system-option", "accounting=True")
    assert off.returncode == on.returncode == 0, off.stderr + on.stderr  # (were refused)
    secrets = run_cli("render", "--system", "kubernetes", "--system-option",
                      'image_pull_secrets=["registry-key"]')
    assert secrets.returncode == 0, secrets.stderr
    assert "imagePullSecrets:\n  - name: registry-key" in secrets.stdout
    no_pe = run_cli("render", "--system", "sge", "--cores", "2", "--system-option",
                    "parallel_environment=None")
    assert no_pe.returncode == 1 and "-pe None" not in no_pe.stdout
    assert "parallel-environment is null" in no_pe.stderr
    text = run_cli("render", "--system", "pbs", "--system-option",
                   "resource_spec=select=1:ncpus=4")  # not a literal: the text itself
    assert "#PBS -l select=1:ncpus=4\n" in text.stdout


def test_gateway_dev_takes_the_start_timeout_its_help_shows() -> None:
    """``--start-timeout 90s`` was refused as "not a valid float", while the error for a bad
    value asked for a string such as "90s"."""
    from hybrid.gateway_server.cli import dev

    context = dev.make_context("dev", ["--start-timeout", "90s"])
    assert context.params["start_timeout"] == 90
