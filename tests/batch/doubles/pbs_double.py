"""PBSDouble: a test double of the PBS Pro / OpenPBS client tools ``qsub``, ``qstat``, ``qdel``.

NOT a batch system: it stands in for one on machines without PBS (see batch_double.py for
how jobs really run). The shell shims in ``doubles/pbs/`` exec this file as
``pbs_double.py TOOL ARGS...``; state lives in ``$HYBRID_PBS_DOUBLE_STATE``.

What it reproduces, from the OpenPBS sources and the PBS Professional reference guide:

* ``qsub [options] [script]`` (script on stdin when none is given): directives are the lines
  ``#PBS ...`` (prefix changed by ``-C`` or ``PBS_DPREFIX``) before the first executable line,
  split like shell words; command-line options win over directives. Options are parsed with
  qsub's getopt string, so an unknown option is refused (``qsub: invalid option -- 'Z'``,
  usage, exit 2); values are checked as PBS does (``-J`` exactly as ``chk_Jrange.c``: ``X-Y[:Z]``
  with Y > X, so ``-J 1-1`` is refused; ``-l`` resources against the built-in resource table
  with PBS size and duration syntax; ``-N`` at most 236 printable characters, ...).
  It prints ``<seq>.<server>`` or, for an array, ``<seq>[].<server>``; subjobs are
  ``<seq>[<index>].<server>`` and run with ``PBS_JOBID``, ``PBS_ARRAY_INDEX``, ``PBS_ARRAY_ID``,
  ``PBS_JOBNAME``, ``PBS_O_*``, the ``-v`` variables and otherwise a clean environment
  (``-V`` exports everything), in ``$HOME``, with the ``-S`` shell (default ``/bin/sh``).
  Output goes to ``-o``/``-e`` (``-j oe`` joins); a directory gets
  ``<name>.o<seq>[.<index>]`` and ``^array_index^`` is substituted. ``-h`` submits held
  (``Hold_Types = u``). A submission with ``-I`` (interactive) is refused.
* ``qstat -f -F json [-x] [-t] [ids]`` prints the PBS Pro 19+ JSON document
  (``timestamp``, ``pbs_version``, ``pbs_server``, ``Jobs`` keyed by job id, resources and
  ``Variable_List`` as nested objects, numbers as numbers, as ``qstat.c``'s ``prt_attr``
  writes them); ``qstat -f`` without ``-F`` prints the text form (``Job Id: ...`` then
  ``    name = value`` lines). States: ``Q`` (substate 10), ``H`` (20), ``R`` (42), ``E`` (50)
  and, for ended jobs, ``F`` (``X`` for subjobs) with substate 91 (deleted), 92 (finished)
  or 93 (failed) and ``Exit_status`` (256 + signal when killed by a signal). Array parents
  carry ``array = True`` and state ``Q``/``B``/``F``. Without ``-x`` ended jobs are hidden
  (``qstat: <id> Job has finished, use -x or -H to obtain historical job information``);
  an unknown id prints ``qstat: Unknown Job Id <id>``; both exit non-zero.
* ``qdel [-W force] ids``: SIGTERM to a running job's process group, SIGKILL after the kill
  delay (``HYBRID_PBS_DOUBLE_KILL_DELAY``, default 10 s, as PBS's ``kill_delay``); a queued
  or held job ends at once. Unknown ids print ``qdel: Unknown Job Id <id>``, ended ones
  ``qdel: Job has finished <id>``, and the exit status is non-zero.

Knobs for tests: ``HYBRID_PBS_DOUBLE_SERVER`` (server name, default ``pbsdouble``),
``HYBRID_PBS_DOUBLE_START_DELAY`` (seconds a job stays queued, default 0). Walltime is
parsed and shown, not enforced.
"""

from __future__ import annotations

import getpass
import json
import os
import re
import shlex
import signal
import socket
import sys
import time
from getopt import GetoptError, getopt
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from batch_double import (
    ENDED,
    EXITING,
    HELD,
    QUEUED,
    RUNNING,
    DoubleUsageError,
    StateStore,
    new_element,
    request_delete,
    run_tool,
    start_elements,
)

STATE_VARIABLE = "HYBRID_PBS_DOUBLE_STATE"
PBS_VERSION = "22.05.11"
QSUB_OPTIONS = "a:A:c:C:e:fhIj:J:k:l:m:M:N:o:p:P:q:r:R:S:u:v:VW:Xz"
QSUB_USAGE = (
    "usage: qsub [-a date_time] [-A account_string] [-c interval]\n"
    "\t[-C directive_prefix] [-e path] [-f ] [-h ] [-I [-X]] [-j o|e|n] [-J X-Y[:Z]]\n"
    "\t[-k keep] [-l resource_list] [-m mail_options] [-M user_list]\n"
    "\t[-N jobname] [-o path] [-p priority] [-P project] [-q queue] [-r y|n]\n"
    "\t[-R o|e|oe] [-S path] [-u user_list] [-W otherattributes=value...]\n"
    "\t[-v variable_list] [-V ] [-z] [script | -- command [arg1 ...]]\n"
    "       qsub --version"
)
SIZE = re.compile(r"^\d+(?:[kmgtp]?[bw])?$", re.IGNORECASE)
DURATION = re.compile(r"^(?:(?:\d+:)?\d+:)?\d+(?:\.\d+)?$")
INTEGER = re.compile(r"^\d+$")
# Job-wide resources (-l name=value) and chunk resources (select=N:name=value:...).
JOB_RESOURCES = {
    "select": "select", "place": "place", "walltime": "duration", "cput": "duration",
    "pcput": "duration", "ncpus": "integer", "mem": "size", "vmem": "size", "pmem": "size",
    "ngpus": "integer", "software": "string", "file": "size", "nodect": "integer",
    "host": "string", "arch": "string", "mpiprocs": "integer", "ompthreads": "integer",
    "naccelerators": "integer", "max_walltime": "duration", "min_walltime": "duration",
    "preempt_targets": "string",
}
CHUNK_RESOURCES = {
    "ncpus": "integer", "mem": "size", "vmem": "size", "ngpus": "integer",
    "mpiprocs": "integer", "ompthreads": "integer", "host": "string", "vnode": "string",
    "arch": "string", "naccelerators": "integer", "accelerator": "boolean",
    "accelerator_model": "string", "accelerator_memory": "size",
}
W_ATTRIBUTES = {"depend", "group_list", "stagein", "stageout", "umask", "sandbox", "block",
                "run_count", "release_nodes_on_stageout", "tolerate_node_failures",
                "create_resv_from_job", "max_run_subjobs", "interactive", "x11_cookie",
                "x11_port", "pwd", "cred", "Output_Path", "Error_Path"}
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


# --------------------------------------------------------------------------- validation

def check_value(kind: str, name: str, value: str) -> None:
    """Refuse a resource value PBS would refuse."""
    ok = {
        "integer": INTEGER.match(value),
        "size": SIZE.match(value),
        "duration": DURATION.match(value),
        "boolean": value.lower() in ("true", "false", "t", "f", "y", "n", "1", "0"),
        "string": bool(value) and not any(c.isspace() for c in value),
        "select": True,
        "place": True,
    }[kind]
    if not ok:
        raise DoubleUsageError(
            f"qsub: Illegal attribute or resource value Resource_List.{name}", 2
        )


def parse_select(value: str) -> list[tuple[int, dict[str, str]]]:
    """``N:res=val:res=val+...`` -> [(N, {res: val})]; refuse what PBS refuses."""
    chunks = []
    for chunk in value.split("+"):
        parts = chunk.split(":")
        count = 1
        if parts and INTEGER.match(parts[0]):
            count = int(parts.pop(0))
        if count < 1:
            raise DoubleUsageError("qsub: Illegal attribute or resource value "
                                   "Resource_List.select", 2)
        resources: dict[str, str] = {}
        for part in parts:
            name, equals, setting = part.partition("=")
            if not equals or not name or not setting:
                raise DoubleUsageError("qsub: Illegal attribute or resource value "
                                       "Resource_List.select", 2)
            if name not in CHUNK_RESOURCES:
                raise DoubleUsageError(f"qsub: Unknown resource: {name}", 2)
            check_value(CHUNK_RESOURCES[name], name, setting)
            resources[name] = setting
        chunks.append((count, resources))
    return chunks


def check_place(value: str) -> None:
    """``arrangement[:sharing][:group=resource]`` as PBS Pro accepts it."""
    for part in value.split(":"):
        if part in ("free", "pack", "scatter", "vscatter", "excl", "shared", "exclhost"):
            continue
        if part.startswith("group=") and len(part) > len("group="):
            continue
        raise DoubleUsageError("qsub: Illegal attribute or resource value "
                               "Resource_List.place", 2)


def parse_resource_list(value: str) -> dict[str, str]:
    """``-l name=value[,name=value]`` -> {name: value}."""
    resources = {}
    for item in value.split(","):
        name, equals, setting = item.partition("=")
        name = name.strip()
        if not name or not equals or setting == "":
            raise DoubleUsageError("qsub: illegal -l value", 2)
        if name not in JOB_RESOURCES:
            raise DoubleUsageError(f"qsub: Unknown resource Resource_List.{name}", 2)
        kind = JOB_RESOURCES[name]
        check_value(kind, name, setting)
        if kind == "select":
            parse_select(setting)
        elif kind == "place":
            check_place(setting)
        resources[name] = setting
    return resources


def chk_jrange(value: str) -> tuple[int, int, int]:
    """``X-Y[:Z]`` with Y > X and Z >= 1, exactly the checks of OpenPBS ``chk_Jrange.c``."""
    match = re.fullmatch(r"(\d+)-(\d+)(?::(\d+))?", value)
    if not match:
        raise DoubleUsageError("qsub: illegal -J value", 2)
    start, end, step = int(match[1]), int(match[2]), int(match[3] or 1)
    if end <= start or step < 1:
        raise DoubleUsageError("qsub: illegal -J value", 2)
    return start, end, step


def check_job_name(name: str) -> str:
    """PBS Pro job names: up to 236 printable characters, no white space, a sane start."""
    if (not name or len(name) > 236 or any(not c.isprintable() or c.isspace() for c in name)
            or not (name[0].isalnum() or name[0] in "_+-")):
        raise DoubleUsageError("qsub: illegal -N value", 2)
    return name


def parse_variables(value: str) -> list[tuple[str, str | None]]:
    """``-v VAR[=value],...`` (a backslash escapes a comma inside a value)."""
    items: list[tuple[str, str | None]] = []
    for item in re.split(r"(?<!\\),", value):
        name, equals, setting = item.partition("=")
        if not ENV_NAME.match(name):
            raise DoubleUsageError("qsub: illegal -v value", 2)
        items.append((name, setting.replace("\\,", ",") if equals else None))
    return items


def check_option(option: str, value: str) -> None:
    """Refuse option values that qsub refuses before contacting the server."""
    def bad() -> DoubleUsageError:
        return DoubleUsageError(f"qsub: illegal {option} value", 2)

    if option == "-N":
        check_job_name(value)
    elif option == "-J":
        chk_jrange(value)
    elif option == "-l":
        parse_resource_list(value)
    elif option == "-v":
        parse_variables(value)
    elif option == "-j" and value not in ("oe", "eo", "n", "o", "e"):
        raise bad()
    elif option == "-r" and value not in ("y", "n"):
        raise bad()
    elif option == "-m" and not re.fullmatch(r"n|[abej]+", value):
        raise bad()
    elif option == "-k" and not re.fullmatch(r"n|[oed]+", value):
        raise bad()
    elif option == "-p" and not (re.fullmatch(r"-?\d+", value) and -1024 <= int(value) <= 1023):
        raise bad()
    elif option == "-a" and not re.fullmatch(r"(\d\d){0,4}\d{4}(\.\d\d)?", value):
        raise bad()
    elif option in ("-A", "-P", "-M", "-u", "-S", "-o", "-e") and (
        not value or any(c in value for c in "\n\r")
    ):
        raise bad()
    elif option == "-q" and not re.fullmatch(r"[A-Za-z0-9_.-]*(@[A-Za-z0-9_.:-]+)?", value):
        raise bad()
    elif option == "-W":
        for item in re.split(r"(?<!\\),", value):
            name, equals, setting = item.partition("=")
            if name not in W_ATTRIBUTES or not equals or not setting:
                raise DoubleUsageError(f"qsub: Unknown attribute or illegal -W value {item}", 2)
    elif option == "-I":
        raise DoubleUsageError("qsub: interactive jobs (-I) cannot run in this test double", 2)


def parse_options(words: list[str], where: str) -> list[tuple[str, str]]:
    """getopt with qsub's option string; unknown options and stray words are refused."""
    try:
        options, rest = getopt(words, QSUB_OPTIONS)
    except GetoptError as error:
        letter = error.opt or "?"
        if "requires argument" in error.msg:
            message = f"qsub: option requires an argument -- '{letter}'"
        else:
            message = f"qsub: invalid option -- '{letter}'"
        raise DoubleUsageError(f"{message}\n{QSUB_USAGE}", 2) from None
    if rest and where == "directive":
        raise DoubleUsageError(f"qsub: directive error: {shlex.join(words)}", 2)
    for option, value in options:
        check_option(option, value)
    if where == "command line":
        return options + [("--script", arg) for arg in rest[:1]]
    return options


def parse_directives(script: str, prefix: str = "#PBS") -> list[tuple[str, str]]:
    """The ``#PBS`` directives of a job script, in order, as (option, value) pairs.

    Scanning stops at the first line that is neither blank nor a comment, as in qsub.
    """
    options: list[tuple[str, str]] = []
    for number, line in enumerate(script.splitlines(), start=1):
        stripped = line.strip()
        if number == 1 and stripped.startswith("#!"):
            continue
        if not stripped:
            continue
        if stripped.startswith(prefix) and (
            len(stripped) == len(prefix) or stripped[len(prefix)].isspace()
        ):
            try:
                words = shlex.split(stripped[len(prefix):], comments=False)
            except ValueError as error:
                raise DoubleUsageError(f"qsub: directive error: {stripped} ({error})", 2) from None
            options += parse_options(words, "directive")
        elif stripped.startswith("#"):
            continue
        else:
            break
    return options


# --------------------------------------------------------------------------- qsub

def _resolve_output(path: str | None, workdir: str, name: str, kind: str, seq: int,
                    index: int | None) -> str:
    """Where one element's stdout (kind "o") or stderr ("e") goes."""
    suffix = f".{kind}{seq}" + (f".{index}" if index is not None else "")
    if not path:
        return str(Path(workdir) / f"{name}{suffix}")
    if re.match(r"^[A-Za-z0-9.-]+:", path):
        path = path.split(":", 1)[1]
    if index is not None:
        path = path.replace("^array_index^", str(index))
    if not os.path.isabs(path):
        path = os.path.join(workdir, path)
    if path.endswith("/") or os.path.isdir(path):
        return os.path.join(path, f"{name}{suffix}")
    return path


def _origin_variables(queue: str) -> dict[str, str]:
    variables = {}
    for name in ("HOME", "LANG", "LOGNAME", "PATH", "MAIL", "SHELL", "TZ"):
        if name in os.environ:
            variables[f"PBS_O_{name}"] = os.environ[name]
    variables.update(PBS_O_WORKDIR=os.getcwd(), PBS_O_SYSTEM=os.uname().sysname,
                     PBS_O_QUEUE=queue, PBS_O_HOST=socket.gethostname())
    return variables


def qsub(argv: list[str]) -> int:
    """Submit one job (or job array) from a script file or stdin; print its id."""
    store = StateStore.from_env(STATE_VARIABLE)
    store.log_call("qsub", argv)
    command_line = parse_options(argv, "command line")
    script_file = next((v for o, v in command_line if o == "--script"), None)
    command_line = [(o, v) for o, v in command_line if o != "--script"]
    script = Path(script_file).read_text() if script_file else sys.stdin.read()
    prefix = next((v for o, v in command_line if o == "-C"),
                  os.environ.get("PBS_DPREFIX", "#PBS"))
    options = parse_directives(script, prefix) + command_line

    settings: dict[str, str] = {}
    resources: dict[str, str] = {}
    variables: list[tuple[str, str | None]] = []
    flags: set[str] = set()
    for option, value in options:
        if option == "-l":
            resources.update(parse_resource_list(value))
        elif option == "-v":
            variables += parse_variables(value)
        elif option in ("-h", "-V", "-f", "-z", "-X"):
            flags.add(option)
        else:
            settings[option] = value

    server = os.environ.get("HYBRID_PBS_DOUBLE_SERVER", "pbsdouble")
    queue = settings.get("-q", "workq").split("@")[0] or "workq"
    name = settings.get("-N", Path(script_file).name if script_file else "STDIN")
    array = chk_jrange(settings["-J"]) if "-J" in settings else None
    select = resources.get("select", "1:ncpus=" + resources.get("ncpus", "1"))
    chunks = parse_select(select)
    ncpus = sum(n * int(r.get("ncpus", 1)) for n, r in chunks)
    ngpus = sum(n * int(r.get("ngpus", 0)) for n, r in chunks)
    resource_list: dict[str, Any] = {"ncpus": ncpus, "nodect": sum(n for n, _ in chunks),
                                     "place": resources.get("place", "free"), "select": select}
    if ngpus:
        resource_list["ngpus"] = ngpus
    mems = [(n, r["mem"]) for n, r in chunks if "mem" in r]
    if mems:
        resource_list["mem"] = mems[0][1] if len(mems) == 1 and mems[0][0] == 1 else "+".join(
            f"{n}*{m}" for n, m in mems)
    for key, value in resources.items():
        if key not in ("select", "place"):
            resource_list[key] = int(value) if INTEGER.match(value) else value

    variable_list = _origin_variables(queue)
    if "-V" in flags:
        variable_list.update(os.environ)
    for var, setting in variables:
        variable_list[var] = setting if setting is not None else os.environ.get(var, "")
    shell = settings.get("-S", "/bin/sh").split(",")[0].split("@")[0]
    workdir = os.getcwd()
    join = settings.get("-j", "n")
    with store.lock():
        seq = store.next_sequence(1001)
        key = str(seq)
        job_id = f"{seq}[].{server}" if array else f"{seq}.{server}"
        indices = list(range(array[0], array[1] + 1, array[2])) if array else [None]
        elements, element_env = {}, {}
        for index in indices:
            out = _resolve_output(settings.get("-o"), workdir, name, "o", seq, index)
            err = _resolve_output(settings.get("-e"), workdir, name, "e", seq, index)
            if join in ("oe", "o"):
                err = None
            elif join in ("eo", "e"):
                out, err = err, None
            element = new_element(index or 0, "-h" in flags, out, err)
            elements[str(index or 0)] = element
            element_id = f"{seq}[{index}].{server}" if array else job_id
            element_env[str(index or 0)] = {
                "PBS_JOBID": element_id,
                **({"PBS_ARRAY_INDEX": str(index), "PBS_ARRAY_ID": job_id} if array else {}),
            }
        home = os.path.expanduser("~")
        user = getpass.getuser()
        env = {"HOME": home, "LOGNAME": user, "USER": user, "SHELL": shell,
               "PATH": "/bin:/usr/bin", **variable_list,
               "PBS_JOBNAME": name, "PBS_QUEUE": queue, "PBS_ENVIRONMENT": "PBS_BATCH",
               "PBS_JOBDIR": home, "PBS_TASKNUM": "1", "NCPUS": str(ncpus),
               "OMP_NUM_THREADS": str(ncpus), "PBS_SERVER": server}
        store.script_path(key).write_text(script)
        store.save({
            "key": key, "system": "pbs", "id": job_id, "array": bool(array),
            "array_range": settings.get("-J"), "name": name,
            "owner": f"{user}@{socket.gethostname()}", "queue": queue, "server": server,
            "account": settings.get("-A"), "project": settings.get("-P"),
            "resource_list": resource_list, "variable_list": variable_list,
            "join": join, "output_path": settings.get("-o"), "error_path": settings.get("-e"),
            "shell": shell, "hold": "-h" in flags, "submit_arguments": shlex.join(argv),
            "options": options, "ctime": time.time(), "cwd": home, "env": env,
            "element_env": element_env, "elements": elements, "append_output": False,
            "start_delay": float(os.environ.get("HYBRID_PBS_DOUBLE_START_DELAY", "0")),
            "kill_delay": float(os.environ.get("HYBRID_PBS_DOUBLE_KILL_DELAY", "10")),
        })
    start_elements(store, key)
    print(job_id)
    return 0


# --------------------------------------------------------------------------- qstat

def _exit_status(element: dict[str, Any]) -> int | None:
    code = element["returncode"]
    if code is None:
        return None
    return 256 + (-code) if code < 0 else code


def _element_state(job: dict[str, Any], element: dict[str, Any]) -> tuple[str, int]:
    state = element["state"]
    if state == QUEUED:
        return "Q", 10
    if state == HELD:
        return "H", 20
    if state == RUNNING:
        return "R", 42
    if state == EXITING:
        return "E", 50
    letter = "X" if job["array"] else "F"
    if element["deleted"]:
        return letter, 91
    return letter, 92 if element["returncode"] == 0 else 93


def _comment(job: dict[str, Any], element: dict[str, Any]) -> str | None:
    start = element["start_time"]
    run = (f"Job run at {time.ctime(start)} on (localhost:ncpus="
           f"{job['resource_list']['ncpus']})") if start else None
    if element["state"] == QUEUED:
        return "Not Running: the test double's start delay has not passed"
    if element["state"] in (RUNNING, EXITING):
        return run
    if element["state"] == ENDED:
        if element["deleted"]:
            return f"{run} and terminated" if run else "Job deleted before it ran"
        return f"{run} and {'finished' if element['returncode'] == 0 else 'failed'}"
    return None


def _common_attributes(job: dict[str, Any]) -> dict[str, Any]:
    host = job["owner"].split("@", 1)[1]
    attributes: dict[str, Any] = {
        "Job_Name": job["name"], "Job_Owner": job["owner"], "job_state": None,
    }
    attributes.update({
        "queue": job["queue"], "server": job["server"],
        **({"Account_Name": job["account"]} if job["account"] else {}),
        "Checkpoint": "u", "ctime": time.ctime(job["ctime"]),
        "Error_Path": f"{host}:{job['error_path'] or job['cwd']}",
        "Hold_Types": "u" if job["hold"] else "n", "Join_Path": job["join"],
        "Keep_Files": "n", "Mail_Points": "a", "mtime": time.ctime(job["ctime"]),
        "Output_Path": f"{host}:{job['output_path'] or job['cwd']}", "Priority": 0,
        "qtime": time.ctime(job["ctime"]), "Rerunable": "True",
        "Resource_List": job["resource_list"], "Shell_Path_List": job["shell"],
        "Variable_List": job["variable_list"], "etime": time.ctime(job["ctime"]),
        "Submit_arguments": job["submit_arguments"],
        "project": job["project"] or "_pbs_project_default",
    })
    return attributes


def element_attributes(job: dict[str, Any], element: dict[str, Any]) -> dict[str, Any]:
    """The attributes qstat -f shows for a plain job or one subjob."""
    attributes = _common_attributes(job)
    letter, substate = _element_state(job, element)
    attributes["job_state"] = letter
    attributes["substate"] = substate
    if element["start_time"]:
        end = element["end_time"] or time.time()
        walltime = int(end - element["start_time"])
        attributes["resources_used"] = {
            "cpupercent": 0, "cput": "00:00:00", "mem": "0kb", "ncpus":
            job["resource_list"]["ncpus"], "vmem": "0kb",
            "walltime": f"{walltime // 3600:02d}:{walltime // 60 % 60:02d}:{walltime % 60:02d}",
        }
        attributes["stime"] = time.ctime(element["start_time"])
        attributes["exec_host"] = "localhost/0"
        attributes["exec_vnode"] = f"(localhost:ncpus={job['resource_list']['ncpus']})"
        attributes["session_id"] = element["pid"]
        attributes["run_count"] = 1
    comment = _comment(job, element)
    if comment:
        attributes["comment"] = comment
    exit_status = _exit_status(element)
    if element["state"] == ENDED and exit_status is not None:
        attributes["Exit_status"] = exit_status
    if job["array"]:
        attributes["array_id"] = job["id"]
        attributes["array_index"] = element["index"]
    return attributes


def parent_attributes(job: dict[str, Any]) -> dict[str, Any]:
    """The attributes of an array's parent job (state B once a subjob began)."""
    attributes = _common_attributes(job)
    elements = list(job["elements"].values())
    states = [e["state"] for e in elements]
    if all(s == ENDED for s in states):
        letter, substate = "F", 92
    elif any(e["start_time"] or e["state"] == ENDED for e in elements):
        letter, substate = "B", 153
    elif all(s == HELD for s in states):
        letter, substate = "H", 20
    else:
        letter, substate = "Q", 10
    attributes["job_state"] = letter
    attributes["substate"] = substate
    attributes["array"] = "True"
    attributes["array_indices_submitted"] = job["array_range"]
    remaining = [str(e["index"]) for e in elements if e["state"] in (QUEUED, HELD)]
    attributes["array_indices_remaining"] = ",".join(remaining) or "-"
    attributes["array_state_count"] = (
        f"Queued:{states.count(QUEUED) + states.count(HELD)} Running:{states.count(RUNNING)} "
        f"Exiting:{states.count(EXITING)} Expired:{states.count(ENDED)} "
    )
    return attributes


def _job_ended(job: dict[str, Any]) -> bool:
    return all(e["state"] == ENDED for e in job["elements"].values())


def _split_id(job_id: str, server: str) -> tuple[str, str | None]:
    """``1234[2].srv`` -> ("1234", "2"); ``1234[].srv`` -> ("1234", ""); ``1234`` -> (.., None)."""
    match = re.fullmatch(r"(\d+)(?:\[(\d*)\])?(?:\.(\S+))?", job_id)
    if not match or (match[3] and match[3] != server):
        return "", None
    return match[1], match[2]


def _select(store: StateStore, ids: list[str], history: bool, subjobs: bool, server: str,
            errors: list[str]) -> list[tuple[str, dict[str, Any]]]:
    """(id, attributes) of what qstat shows for these ids (all jobs when none)."""
    shown: list[tuple[str, dict[str, Any]]] = []

    def add_job(job: dict[str, Any], with_subjobs: bool) -> None:
        if not job["array"]:
            shown.append((job["id"], element_attributes(job, job["elements"]["0"])))
            return
        shown.append((job["id"], parent_attributes(job)))
        if with_subjobs:
            for element in job["elements"].values():
                shown.append((f"{job['key']}[{element['index']}].{server}",
                              element_attributes(job, element)))

    if not ids:
        for job in store.all_jobs():
            if history or not _job_ended(job):
                add_job(job, subjobs)
        return shown
    for job_id in ids:
        key, index = _split_id(job_id, server)
        job = store.load(key) if key else None
        if job is None or (index is not None and not job["array"]) or (
            index is None and job["array"]
        ):
            errors.append(f"qstat: Unknown Job Id {job_id}")
            continue
        if not history and _job_ended(job):
            errors.append(f"qstat: {job_id} Job has finished, use -x or -H to obtain "
                          "historical job information")
            continue
        if index in (None, ""):
            add_job(job, subjobs)
        elif index in job["elements"]:
            element = job["elements"][index]
            shown.append((f"{key}[{index}].{server}", element_attributes(job, element)))
        else:
            errors.append(f"qstat: Unknown Job Id {job_id}")
    return shown


def _text_value(value: Any) -> str:
    if isinstance(value, dict):
        return ",".join(f"{k}={v}" for k, v in value.items())
    return str(value)


def qstat(argv: list[str]) -> int:
    """``qstat [-f [-F json]] [-x] [-t] [-w] [ids]``: the documented output forms."""
    store = StateStore.from_env(STATE_VARIABLE)
    store.log_call("qstat", argv)
    try:
        options, ids = getopt(argv, "fF:xtwJ")
    except GetoptError as error:
        raise DoubleUsageError(f"qstat: invalid option -- '{error.opt}'\n"
                               "usage: qstat [-f [-F json]] [-J] [-t] [-w] [-x] "
                               "[job_identifier...]", 2) from None
    flags = {o for o, _ in options}
    output_format = next((v for o, v in options if o == "-F"), None)
    if output_format is not None and (output_format != "json" or "-f" not in flags):
        raise DoubleUsageError("qstat: this test double supports -F json with -f only", 2)
    server = os.environ.get("HYBRID_PBS_DOUBLE_SERVER", "pbsdouble")
    errors: list[str] = []
    with store.lock():
        shown = _select(store, ids, "-x" in flags, "-t" in flags, server, errors)
    if "-J" in flags:
        shown = [(i, a) for i, a in shown if "[" in i]
    if output_format == "json":
        document: dict[str, Any] = {"timestamp": int(time.time()), "pbs_version": PBS_VERSION,
                                    "pbs_server": server}
        if shown:
            document["Jobs"] = dict(shown)
        print(json.dumps(document, indent=4, separators=(",", ":")))
    elif "-f" in flags:
        for job_id, attributes in shown:
            print(f"Job Id: {job_id}")
            for name, value in attributes.items():
                if isinstance(value, dict) and name != "Variable_List":
                    for resource, setting in value.items():
                        print(f"    {name}.{resource} = {setting}")
                else:
                    print(f"    {name} = {_text_value(value)}")
            print()
    elif shown:
        print("Job id            Name             User              Time Use S Queue")
        print("----------------  ---------------- ----------------  -------- - -----")
        for job_id, attributes in shown:
            print(f"{job_id[:16]:<16}  {attributes['Job_Name'][:16]:<16} "
                  f"{attributes['Job_Owner'].split('@')[0][:16]:<16}  {'0':>8} "
                  f"{attributes['job_state']} {attributes['queue']}")
    for line in errors:
        print(line, file=sys.stderr)
    return 35 if any("has finished" in e for e in errors) else (153 if errors else 0)


# --------------------------------------------------------------------------- qdel

def qdel(argv: list[str]) -> int:
    """``qdel [-W force] ids``: remove exactly these jobs or subjobs."""
    store = StateStore.from_env(STATE_VARIABLE)
    store.log_call("qdel", argv)
    try:
        options, ids = getopt(argv, "W:x")
    except GetoptError as error:
        raise DoubleUsageError(f"qdel: invalid option -- '{error.opt}'\n"
                               "usage: qdel [-W force|suppress_email=X] [-x] job_identifier...",
                               2) from None
    for option, value in options:
        if option == "-W" and value != "force" and not value.startswith("suppress_email="):
            raise DoubleUsageError(f"qdel: illegal -W value {value}", 2)
    if not ids:
        raise DoubleUsageError("usage: qdel [-W force|suppress_email=X] [-x] job_identifier...", 2)
    server = os.environ.get("HYBRID_PBS_DOUBLE_SERVER", "pbsdouble")
    status = 0
    for job_id in ids:
        key, index = _split_id(job_id, server)
        job = store.load(key) if key else None
        if job is None or (index not in (None, "") and index not in job["elements"]) or (
            index is None and job["array"]
        ):
            print(f"qdel: Unknown Job Id {job_id}", file=sys.stderr)
            status = 153
            continue
        targets = list(job["elements"]) if index in (None, "") else [index]
        results = [request_delete(store, key, int(t), (signal.SIGTERM,)) for t in targets]
        if all(r == "ended" for r in results):
            print(f"qdel: Job has finished {job_id}", file=sys.stderr)
            status = 35
    return status


TOOLS = {"qsub": qsub, "qstat": qstat, "qdel": qdel}


def main(argv: list[str]) -> int:
    """``pbs_double.py TOOL ARGS...``."""
    if len(argv) < 2 or argv[1] not in TOOLS:
        print(f"usage: pbs_double.py {{{'|'.join(TOOLS)}}} ARGS...", file=sys.stderr)
        return 2
    return run_tool(TOOLS[argv[1]], argv[2:])


if __name__ == "__main__":
    sys.exit(main(sys.argv))
