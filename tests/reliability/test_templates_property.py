"""A property of every job template (issue 13, part 1): a string a user gives arrives
unchanged, as data, in the job, and never as code, a directive, a submit key or a YAML
document, on every system.

Hypothesis draws the strings a user can give and that pass validation (environment values,
worker arguments, cluster and pool names, queues and accounts, the staging path, a container
image, its binds and options, one extra directive), mixed with fragments an attacker would
try (``$(...)``, backticks, quotes, ``#SBATCH`` after a line break, ``queue 1000``...). Each
example renders hybrid's own files for every system and checks them with the real readers:

* the shell scripts (Slurm, PBS, LSF, local, and HTCondor's executable) pass ``bash -n`` and
  are RUN by bash, up to the worker's start: the worker (python, or the container runtime)
  is a stand-in that records its arguments and environment, which must be exactly the
  worker command and the user's values;
* the directive lines are read as the tools read them (up to the first command): as sbatch
  scans, and with the PBS and LSF test doubles' parsers (``parse_directives``): exactly
  hybrid's directives plus the user's one, its value unchanged;
* HTCondor's submit description is parsed by ``htcondor2.Submit``: its keys are exactly
  hybrid's plus the user's, the queue count is hybrid's, the tag and directory unchanged;
* the Kubernetes manifests are read by ``yaml.safe_load_all``: exactly the pods asked for,
  each running the worker command (after the kubelet's ``$(VAR)`` expansion, done here as
  Kubernetes specifies it) with the user's values.

A canary file that any injected command would create must never exist. Job-script prologues
are code by design and are not drawn.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import htcondor2
import pytest
import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from hybrid.batch import WorkerJob, get_system
from hybrid.batch.slurm import Slurm
from hybrid.errors import ConfigurationError
from hybrid.fields import LINE_BREAKS
from hybrid.pools import PoolSpec
from hybrid.worker import Connection, worker_command
from tests.batch.doubles import lsf_double, pbs_double

pytestmark = pytest.mark.timeout(240)

SCHEDULER = "tcp://127.0.0.1:8786"
COUNT = 3
#: Where the run scripts write; any command injected by a value would create CANARY.
WORK = Path(tempfile.gettempdir()) / f"hybrid-template-property-{os.getpid()}"
CANARY = WORK / "canary"
#: The stand-in worker: records its arguments and environment (NUL-separated).
RECORDER = WORK / "bin" / "record-worker"
#: The job ids each system's script reads, and the id the worker's name is built from.
JOB_IDS: dict[str, tuple[dict[str, str], str]] = {
    "slurm": ({"SLURM_ARRAY_JOB_ID": "77", "SLURM_ARRAY_TASK_ID": "2"}, "77_2"),
    "pbs": ({"PBS_JOBID": "12[3].server"}, "12[3].server"),
    "lsf": ({"LSB_JOBID": "5", "LSB_JOBINDEX": "2"}, "5[2]"),
    "local": ({"HYBRID_JOB_ID": "local-1-1"}, "local-1-1"),
    "htcondor": ({}, "12.3"),
}

# --------------------------------------------------------------------------- strategies
NASTY = (f"$(touch {CANARY})", f"`touch {CANARY}`", f"'; touch {CANARY}; '",
         f'"; touch {CANARY}; "', "\n#SBATCH --array=1-1000\n", "\nqueue 1000\n",
         "\n---\nkind: Pod\n", "$(HYBRID_JOB_ID)", "$$(x)", "${IFS}", "$HOME", "!!", "\\",
         "%j", "#", "*", "~", " ", "\t", "\r\n", "\u2028", "\x85", "-J 1-1000")
#: Characters the test doubles' Python ``splitlines`` takes as line breaks but no batch tool
#: does (FS, GS, RS): kept out of directive text, where only the doubles would split.
PYTHON_ONLY_BREAKS = "\x1c\x1d\x1e"

free_text = st.lists(st.one_of(
    st.text(st.characters(blacklist_characters="\0", blacklist_categories=("Cs",)),
            max_size=8),
    st.sampled_from(NASTY)), max_size=4).map("".join)


def _one_line(text: str) -> str:
    """One line as a directive or path may be: no line break, no surrounding blanks, no
    trailing backslash (a continuation)."""
    for mark in (*LINE_BREAKS, *PYTHON_ONLY_BREAKS):
        text = text.replace(mark, " ")
    while text != text.strip() or text.endswith("\\"):
        text = text.strip().rstrip("\\")
    return text


def _allowed_on_slurm(directive: str) -> bool:
    """Not one of the directives hybrid refuses (those that override its own)."""
    return Slurm.refused_directive(directive) is None


one_line = free_text.map(_one_line).filter(bool)
names = st.from_regex(r"[A-Za-z0-9](?:[A-Za-z0-9._-]{0,20}[A-Za-z0-9])?", fullmatch=True)
words = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._@+-]{0,20}", fullmatch=True)
#: A staging directory name as hybrid.batch.staging-directory allows it (no blank, comma,
#: quote, backslash, $ or backtick), and no % either (a Slurm file-name pattern).
staging_names = st.from_regex(r"[A-Za-z0-9._+@^&()|;:#!=~-]{1,16}", fullmatch=True).filter(
    lambda name: name not in (".", ".."))


@st.composite
def user_values(draw: Callable[..., Any]) -> dict[str, Any]:
    """Everything a user gives one pool, drawn at once."""
    container = draw(st.booleans())
    return {
        "cluster": draw(names), "pool": draw(names),
        "env": {f"HYP_{i}": v for i, v in enumerate(draw(st.lists(free_text, max_size=3)))},
        "args": draw(st.lists(free_text, max_size=3)),
        "queue": draw(st.none() | words), "account": draw(st.none() | words),
        "staging": draw(staging_names),
        "image": "/" + draw(one_line) if container else None,
        "binds": draw(st.lists(one_line.filter(lambda b: "," not in b), max_size=2))
        if container else [],
        "options": draw(st.lists(free_text, max_size=2)) if container else [],
        "directive": draw(one_line.filter(_allowed_on_slurm)),
        "key": "hyp_" + draw(st.from_regex(r"[a-z][a-z0-9_]{0,10}", fullmatch=True)),
    }


# --------------------------------------------------------------------------- readers
def sbatch_directives(script: str) -> list[str]:
    """``#SBATCH`` lines as sbatch finds them: up to the first line (split at newlines
    only) that is neither blank nor a comment."""
    found = []
    for line in script.split("\n")[1:]:
        if line.startswith("#SBATCH"):
            found.append(line)
        elif line.strip() and not line.lstrip().startswith("#"):
            break
    return found


def kubelet_expand(text: str, variables: dict[str, str]) -> str:
    """Kubernetes' ``$(VAR)`` expansion of a command word or env value, as specified
    (``$$`` is one ``$``; ``$(NAME)`` of an unknown NAME, and any other ``$``, stay)."""
    out, cursor = [], 0
    while cursor < len(text):
        char = text[cursor]
        if char != "$" or cursor + 1 == len(text):
            out.append(char)
            cursor += 1
            continue
        following = text[cursor + 1]
        if following == "$":
            out.append("$")
            cursor += 2
        elif following == "(" and ")" in text[cursor + 2:]:
            end = text.index(")", cursor + 2)
            name = text[cursor + 2:end]
            out.append(variables.get(name, f"$({name})"))
            cursor = end + 1
        else:
            out.append("$" + following)
            cursor += 2
    return "".join(out)


def run_script(script: str, env: dict[str, str], *args: str) -> tuple[list[str], dict[str, str]]:
    """``bash -n``, then run ``script`` to the worker's start: the recorded arguments and
    environment of the stand-in worker."""
    path = WORK / "script.sh"
    path.write_text(script)
    checked = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True)
    assert checked.returncode == 0, checked.stderr
    record = WORK / "record"
    for name in ("argv", "env"):
        (record / name).unlink(missing_ok=True)
    subprocess.run(["bash", str(path), *args], capture_output=True, timeout=30,
                   env={"PATH": f"{RECORDER.parent}:/usr/bin:/bin", "RECORD": str(record),
                        **env}, cwd=WORK, check=True)
    argv = (record / "argv").read_bytes().decode().split("\0")[:-1]
    variables = dict(item.split("=", 1) for item in
                     (record / "env").read_bytes().decode().split("\0")[:-1])
    return argv, variables


# --------------------------------------------------------------------------- the jobs
def build(values: dict[str, Any], system: str, plain: bool = False) -> tuple[WorkerJob, Any]:
    """The user's pool on ``system`` (``plain``: the same names, queue and account without
    any of the user's free text: the baseline of the directive checks)."""
    options: dict[str, Any] = {"python": str(RECORDER)}
    if not plain:
        options.update(env=values["env"], worker_extra_args=values["args"])
    if system != "kubernetes":
        options.update(queue=values["queue"], account=values["account"])
        if values["image"] and not plain:
            options.update(container_image=values["image"], container_binds=values["binds"],
                           container_options=values["options"])
        if not plain and system in DIRECTIVES:
            options["job_extra_directives"] = [DIRECTIVES[system](values)]
    spec = PoolSpec.build(values["pool"], system, check_paths=False, **options)
    return WorkerJob(values["cluster"], spec, Connection(SCHEDULER)), get_system(system)


#: The user's extra directive on each system (a free value where the system takes one).
DIRECTIVES: dict[str, Callable[[dict[str, Any]], str]] = {
    "slurm": lambda v: v["directive"],
    "pbs": lambda v: f"-M {shlex.quote(v['directive'])}",
    "lsf": lambda v: f"-u {shlex.quote(v['directive'])}",
    "htcondor": lambda v: f"{v['key']} = {v['directive']}",
}


def listen_words(batch: Any, job: WorkerJob, staging: Path) -> list[str]:
    """What a system adds after the user's worker arguments (the local system: where its
    workers listen, as their scheduler does)."""
    given = worker_command(job.spec, job.connection, None).arguments
    return list(batch.context(job, staging, COUNT)["worker"].arguments[len(given):])


def expected_argv(job: WorkerJob, values: dict[str, Any], job_id: str,
                  added: list[str] = ()) -> list[str]:
    """What the stand-in worker must receive: the worker command after its program (with
    what the system ``added``), and the name the job derives from its id."""
    words = [*worker_command(job.spec, job.connection, None).argv()[1:], *added]
    suffix = re.sub(r"[^A-Za-z0-9._-]", "-", job_id)
    return [*words, "--name", f"{values['cluster']}-{values['pool']}-{suffix}"]


def assert_user_values_arrived(argv: list[str], env: dict[str, str],
                               values: dict[str, Any], added: int = 0) -> None:
    """The user's strings, each exactly once where it belongs (``added``: words the system
    puts after them)."""
    args = values["args"]
    end = len(argv) - 2 - added
    assert argv[end - len(args):end] == args
    if values["image"]:
        binds = [w for b in values["binds"] for w in ("--bind", b)]
        assert argv[:1 + len(binds) + len(values["options"]) + 1] == [
            "exec", *binds, *values["options"], values["image"]]
    for name, value in values["env"].items():
        assert env[name] == value


# --------------------------------------------------------------------------- the property
@pytest.fixture(scope="module")
def workdir() -> Iterator[Path]:
    """The stand-in worker (also as ``apptainer``) and the record directory."""
    (WORK / "bin").mkdir(parents=True)
    (WORK / "record").mkdir()
    RECORDER.write_text('#!/bin/bash\nprintf \'%s\\0\' "$@" > "$RECORD/argv"\n'
                        'env -0 > "$RECORD/env"\n')
    RECORDER.chmod(0o755)
    (WORK / "bin" / "apptainer").symlink_to(RECORDER)
    yield WORK
    shutil.rmtree(WORK)


def check_script_system(system: str, values: dict[str, Any], staging: Path) -> None:
    rule = get_system(system).queue_names
    if values["queue"] and rule and not re.fullmatch(rule[0], values["queue"]):
        # a word the other systems take but this one's submit tool does not: refused at the edge
        with pytest.raises(ConfigurationError, match="queue"):
            build(values, system)
        return
    job, batch = build(values, system)
    script = batch.render(job, staging, COUNT)
    variables, job_id = JOB_IDS[system]
    argv, env = run_script(script, variables)
    added = listen_words(batch, job, staging)
    assert argv == expected_argv(job, values, job_id, added)
    assert_user_values_arrived(argv, env, values, len(added))
    base_job, _ = build(values, system, plain=True)
    baseline = batch.render(base_job, staging, COUNT)
    if system == "slurm":
        assert sbatch_directives(script) == [*sbatch_directives(baseline),
                                             f"#SBATCH {values['directive']}"]
    elif system == "pbs":
        assert pbs_double.parse_directives(script) == [
            *pbs_double.parse_directives(baseline), ("-M", values["directive"])]
    elif system == "lsf":
        assert lsf_double.parse_directives(script) == [
            *lsf_double.parse_directives(baseline), ("-u", values["directive"])]


def check_htcondor(values: dict[str, Any], staging: Path) -> None:
    job, batch = build(values, "htcondor")
    files = batch.job_files(job, staging, COUNT)
    description, wrapper = files.values()
    submit = htcondor2.Submit(description)
    base_job, _ = build(values, "htcondor", plain=True)
    baseline = htcondor2.Submit(batch.render(base_job, staging, COUNT))
    assert set(submit.keys()) == set(baseline.keys()) | {values["key"]}
    assert submit[values["key"]] == values["directive"]
    assert submit.getQArgs() == str(COUNT)
    assert submit["My.HybridCluster"] == f'"{values["cluster"]}"'
    assert submit["My.HybridClusterPool"] == f'"{values["pool"]}"'
    assert submit["initialdir"] == str(staging)
    _, job_id = JOB_IDS["htcondor"]
    argv, env = run_script(wrapper, {}, job_id)
    assert argv == expected_argv(job, values, job_id)
    assert_user_values_arrived(argv, env, values)


def check_kubernetes(values: dict[str, Any], staging: Path) -> None:
    job, batch = build(values, "kubernetes")
    documents = list(yaml.safe_load_all(batch.job_files(job, staging, COUNT)["pods.yaml"]))
    assert len(documents) == COUNT
    assert all(d["kind"] == "Pod" and d["apiVersion"] == "v1" for d in documents)
    for document in documents:
        name = document["metadata"]["name"]
        container, = document["spec"]["containers"]
        variables: dict[str, str] = {}
        for item in container["env"]:  # each value may use the ones before it
            raw = name if "valueFrom" in item else item["value"]
            variables[item["name"]] = kubelet_expand(raw, variables)
        command = [kubelet_expand(word, variables) for word in container["command"]]
        assert command == [str(RECORDER), *expected_argv(job, values, name)]
        assert_user_values_arrived(command[1:], variables, {**values, "image": None})


@settings(max_examples=25, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(values=user_values())
@example(values={"cluster": "c", "pool": "p", "env": {}, "args": [], "queue": "0+",
                 "account": None, "image": None, "binds": [], "options": [], "directive": "x",
                 "key": "hyp_x", "staging": "s"})  # found by CI: qsub's -q refuses '+'
def test_user_strings_arrive_unchanged_as_data_on_every_system(workdir: Path,
                                                               values: dict[str, Any]) -> None:
    staging = workdir / "staging" / values["staging"]
    staging.mkdir(parents=True, exist_ok=True)
    for system in ("slurm", "pbs", "lsf", "local"):
        check_script_system(system, values, staging)
    check_htcondor(values, staging)
    check_kubernetes(values, staging)
    assert not CANARY.exists()


def test_the_readers_would_see_an_injection(workdir: Path) -> None:
    """The checks can fail: text spliced in unquoted IS seen as a directive, a submit key,
    a YAML document and code."""
    values = {"cluster": "c", "pool": "p", "env": {}, "args": [], "queue": None,
              "account": None, "image": None, "binds": [], "options": [], "directive": "x",
              "key": "hyp_x", "staging": "s"}
    staging = workdir / "staging" / "s"
    staging.mkdir(parents=True, exist_ok=True)
    job, slurm = build(values, "slurm")
    script = slurm.render(job, staging, 1)
    spliced = script.replace("#SBATCH --ntasks=1", "#SBATCH --ntasks=1\n#SBATCH --array=1-9")
    assert len(sbatch_directives(spliced)) == len(sbatch_directives(script)) + 1
    assert ("-J", "1-9") in pbs_double.parse_directives("#!/bin/bash\n#PBS -J 1-9\ntrue\n")
    assert htcondor2.Submit("executable = /bin/true\nx = 1\nqueue 1000\n").getQArgs() == "1000"
    assert len(list(yaml.safe_load_all("a: 1\n---\nkind: Pod\n"))) == 2
    run_script(f"#!/bin/bash\nx=$(touch {CANARY})\nexec record-worker\n", {})
    assert CANARY.exists()
    CANARY.unlink()
