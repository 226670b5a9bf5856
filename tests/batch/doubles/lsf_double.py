"""LSFDouble: a test double of the IBM Spectrum LSF 10.1 tools ``bsub``, ``bjobs``, ``bkill``.

NOT a batch system: it stands in for one on machines without LSF (see batch_double.py for
how jobs really run). The shell shims in ``doubles/lsf/`` exec this file as
``lsf_double.py TOOL ARGS...``; state lives in ``$HYBRID_LSF_DOUBLE_STATE``.

What it reproduces, from the IBM Spectrum LSF 10.1 command reference (bsub, bjobs, bkill)
and recorded ``bjobs -json`` output:

* ``bsub [options] < script``: the options come from the command line and from the
  script's ``#BSUB`` lines (split like shell words, up to the first command line); the
  command line wins. Unknown options are refused (``bsub: illegal option -- Z``, exit 255)
  and values are checked: ``-J "name[1-n]"`` index lists (``start[-end[:step]]``,
  comma-separated, optional ``%limit``), ``-n min[,max]``, ``-M limit[KB|MB|GB|...]``,
  ``-W [hour:]minute[/host]``, ``-R`` sections (``select order rusage span same cu
  affinity``, balanced brackets), ``-gpu "num=N[:mode=...]..."``, ``-sp``, ``-env``.
  It prints ``Job <1234> is submitted to queue <q>.`` (``default queue <normal>`` without
  ``-q``). Each array element runs with ``LSB_JOBID``, ``LSB_JOBINDEX`` (0 for a plain
  job), ``LSB_JOBNAME``, ``LSB_QUEUE``, ``LSB_DJOB_NUMPROC``, ``LS_SUBCWD`` ... on top of the
  submission environment (LSF copies it; ``-env none`` does not), in the submission
  directory (or ``-cwd``). ``-o``/``-oo`` (append/overwrite) take ``%J`` and ``%I``;
  without ``-e`` stderr joins stdout; without ``-o`` LSF would mail the output, the double
  writes it to its state directory. ``-H`` submits held (``PSUSP``). Interactive
  (``-I*``) and blocking (``-K``) submissions are refused.
* ``bjobs [-a|-d] [-o "field[:width] ... [delimiter='c']"] [-json] [-noheader] [ids]``:
  ``-json`` prints ``{"COMMAND":"bjobs","JOBS":n,"RECORDS":[{FIELD:"value",...}]}`` with
  upper-case field names, every value a string and ``/`` escaped as ``\\/`` (as LSF writes
  it); an id it does not know becomes ``{"JOBID":id,"ERROR":"Job <id> is not found"}``
  (``Job <id> is not found`` on stderr without ``-json``), exit 255. Array elements are
  listed one per record (``JOBID`` "1234", ``JOBINDEX`` "2", ``JOB_NAME`` "name[2]"). ``STAT``
  is ``PEND``/``PSUSP``/``RUN``/``DONE``/``EXIT``; ``PEND_REASON`` as LSF words it
  (``New job is waiting for scheduling;``); ``EXIT_CODE`` is empty unless the job exited
  non-zero (128 + signal when killed). With no job to show: ``No unfinished job found``
  (``No job found`` with ``-a``/``-d``) on stderr, exit 255.
* ``bkill [-s signal] ids``: ``Job <id> is being terminated``; SIGINT and SIGTERM to the
  element's process group, SIGKILL after ``HYBRID_LSF_DOUBLE_TERMINATE_INTERVAL`` seconds
  (default 10, LSF's ``JOB_TERMINATE_INTERVAL``); a pending element ends at once.
  ``Job <id>: Job has already finished`` / ``Job <id>: No matching job found``, exit 255.

Knobs for tests: ``HYBRID_LSF_DOUBLE_START_DELAY`` (seconds a job stays pending, default 0).
Run limits are parsed, not enforced.
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
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from batch_double import (
    ACTIVE_STATES,
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

STATE_VARIABLE = "HYBRID_LSF_DOUBLE_STATE"
DEFAULT_QUEUE = "normal"
USAGE = ("Usage: bsub [-h] [-V] [-H] [-x] [-J job_name] [-Jd \"job_description\"] "
         "[-n min[,max]] [-R res_req] [-M mem_limit] [-W [hour:]minute] [-q queue_name] "
         "[-P project_name] [-o out_file] [-e err_file] [-gpu - | \"gpu_req\"] [command]")
#: bsub options: name -> whether it takes a value.
BSUB_OPTIONS = {
    "-J": True, "-Jd": True, "-n": True, "-R": True, "-M": True, "-W": True, "-We": True,
    "-q": True, "-P": True, "-o": True, "-oo": True, "-e": True, "-eo": True, "-gpu": True,
    "-H": False, "-x": False, "-G": True, "-app": True, "-m": True, "-w": True, "-B": False,
    "-N": False, "-u": True, "-E": True, "-Ep": True, "-L": True, "-cwd": True,
    "-outdir": True, "-env": True, "-sp": True, "-b": True, "-t": True, "-c": True,
    "-g": True, "-sla": True, "-r": False, "-rn": False, "-U": True, "-hl": False,
    "-ul": False, "-i": True, "-is": True, "-K": False, "-I": False, "-Ip": False,
    "-Is": False, "-XF": False, "-tty": False, "-ti": False,
}
REFUSED = {"-K", "-I", "-Ip", "-Is", "-XF", "-tty", "-ti"}
RESREQ_SECTIONS = {"select", "order", "rusage", "span", "same", "cu", "affinity"}
GPU_KEYS = {"num", "mode", "mps", "j_exclusive", "aff", "block", "gpack", "gvendor",
            "gmodel", "gtile", "gmem", "glink", "nvlink"}
MEMORY = re.compile(r"^\d+(?:\.\d+)?(?:[KMGTPEZ]B?)?$", re.IGNORECASE)
#: bjobs -o field -> the column header (which is also the JSON key).
FIELDS = {
    "jobid": "JOBID", "jobindex": "JOBINDEX", "stat": "STAT", "job_name": "JOB_NAME",
    "name": "JOB_NAME", "job_description": "JOB_DESCRIPTION", "exit_code": "EXIT_CODE",
    "pend_reason": "PEND_REASON", "queue": "QUEUE", "user": "USER",
    "proj_name": "PROJ_NAME", "from_host": "FROM_HOST", "exec_host": "EXEC_HOST",
    "submit_time": "SUBMIT_TIME", "start_time": "START_TIME", "finish_time": "FINISH_TIME",
    "command": "COMMAND", "slots": "SLOTS", "nreq_slot": "NREQ_SLOT",
    "output_file": "OUTPUT_FILE", "error_file": "ERROR_FILE", "pids": "PIDS",
}


# --------------------------------------------------------------------------- validation

def _bad(option: str, value: str) -> DoubleUsageError:
    return DoubleUsageError(f"{value}: Bad argument for option {option}. Job not submitted.",
                            255)


def parse_index_list(spec: str) -> list[int]:
    """``1-3,5,7-11:2`` -> the indices (LSF job array index list)."""
    indices: list[int] = []
    for part in spec.split(","):
        match = re.fullmatch(r"(\d+)(?:-(\d+)(?::(\d+))?)?", part.strip())
        if not match:
            raise DoubleUsageError(f"Bad job name. Job not submitted. ({spec})", 255)
        start = int(match[1])
        end = int(match[2]) if match[2] else start
        step = int(match[3] or 1)
        if start < 1 or end < start or step < 1:
            raise DoubleUsageError(f"Bad job array index list. Job not submitted. ({spec})", 255)
        indices += list(range(start, end + 1, step))
    return indices


def parse_job_name(value: str) -> tuple[str, list[int] | None]:
    """``name[index_list][%limit]`` -> (name, indices or None for a plain job)."""
    match = re.fullmatch(r"([^\[\]]*)(?:\[([^\[\]]+)\](?:%\d+)?)?", value)
    if not match or not match[1] or len(value) > 4094:
        raise DoubleUsageError("Bad job name. Job not submitted.", 255)
    return match[1], parse_index_list(match[2]) if match[2] else None


def check_resreq(value: str) -> None:
    """A resource requirement string: bare select string or ``section[...]`` sections."""
    text = value.strip()
    if not text:
        raise _bad("-R", value)
    if "[" not in text and "]" not in text:
        return
    position = 0
    section = re.compile(r"\s*([a-z]+)\[([^\[\]]*)\]\s*")
    while position < len(text):
        match = section.match(text, position)
        if not match or match[1] not in RESREQ_SECTIONS:
            raise DoubleUsageError(f"{value}: Bad resource requirement syntax. "
                                   "Job not submitted.", 255)
        if match[1] == "span" and not re.fullmatch(r"(hosts|ptile|block)=-?\d+", match[2]):
            raise DoubleUsageError(f"{value}: Bad resource requirement syntax. "
                                   "Job not submitted.", 255)
        if match[1] == "rusage":
            for item in re.split(r"[:,]", match[2]):
                name, _, amount = item.partition("=")
                if name.strip() == "mem" and not MEMORY.match(amount.strip()):
                    raise DoubleUsageError(f"{value}: Bad resource requirement syntax. "
                                           "Job not submitted.", 255)
        position = match.end()


def check_gpu(value: str) -> None:
    """``-gpu -`` or ``"num=N[:mode=shared|exclusive_process][:...]"``."""
    if value == "-":
        return
    for item in value.split(":"):
        key, equals, setting = item.partition("=")
        if key not in GPU_KEYS or not equals or not setting:
            raise DoubleUsageError(f"{value}: Invalid GPU requirement. Job not submitted.", 255)
        if key == "num" and not re.fullmatch(r"[1-9]\d*(/(task|host))?", setting):
            raise DoubleUsageError(f"{value}: Invalid GPU requirement. Job not submitted.", 255)
        if key == "mode" and setting not in ("shared", "exclusive_process"):
            raise DoubleUsageError(f"{value}: Invalid GPU requirement. Job not submitted.", 255)


def check_option(option: str, value: str) -> None:
    """Refuse values bsub refuses."""
    if option in REFUSED:
        raise DoubleUsageError(f"bsub: {option} (interactive or blocking jobs) cannot run in "
                               "this test double", 255)
    if option == "-J":
        parse_job_name(value)
    elif option == "-n":
        match = re.fullmatch(r"(\d+)(?:,(\d+))?", value)
        if not match or int(match[1]) < 1 or (match[2] and int(match[2]) < int(match[1])):
            raise _bad(option, value)
    elif option == "-R":
        check_resreq(value)
    elif option == "-M" and not MEMORY.match(value):
        raise _bad(option, value)
    elif option in ("-W", "-We"):
        match = re.fullmatch(r"(?:(\d+):)?(\d+)(?:/\S+)?", value)
        if not match or (match[1] is not None and int(match[2]) > 59):
            raise _bad(option, value)
    elif option == "-gpu":
        check_gpu(value)
    elif option == "-sp" and not re.fullmatch(r"[1-9]\d*", value):
        raise _bad(option, value)
    elif option == "-q" and not re.fullmatch(r"[A-Za-z0-9_.-]+( [A-Za-z0-9_.-]+)*", value):
        raise _bad(option, value)
    elif option == "-env" and not re.fullmatch(r"none|all(,.*)?|~?[A-Za-z_]\w*(=.*)?(,.*)?",
                                               value):
        raise _bad(option, value)
    elif BSUB_OPTIONS[option] and (not value or "\n" in value):
        raise _bad(option, value)


def parse_options(words: list[str], where: str) -> tuple[list[tuple[str, str]], list[str]]:
    """(options, the command words) of a bsub command line or ``#BSUB`` line."""
    options: list[tuple[str, str]] = []
    position = 0
    while position < len(words):
        word = words[position]
        if not word.startswith("-") or word == "-":
            break
        if word not in BSUB_OPTIONS:
            raise DoubleUsageError(f"bsub: illegal option -- {word.lstrip('-')}\n{USAGE}", 255)
        if BSUB_OPTIONS[word]:
            if position + 1 >= len(words):
                raise DoubleUsageError(f"bsub: option requires an argument -- "
                                       f"{word.lstrip('-')}\n{USAGE}", 255)
            value = words[position + 1]
            position += 2
        else:
            value = ""
            position += 1
        check_option(word, value)
        options.append((word, value))
    rest = words[position:]
    if rest and where == "directive":
        raise DoubleUsageError(f"bsub: bad #BSUB line: {shlex.join(words)}", 255)
    return options, rest


def parse_directives(script: str) -> list[tuple[str, str]]:
    """The ``#BSUB`` options of a job script (up to its first command line), in order."""
    options: list[tuple[str, str]] = []
    for number, line in enumerate(script.splitlines(), start=1):
        stripped = line.strip()
        if (number == 1 and stripped.startswith("#!")) or not stripped:
            continue
        if stripped.startswith("#BSUB") and (len(stripped) == 5 or stripped[5].isspace()):
            try:
                words = shlex.split(stripped[5:], comments=False)
            except ValueError as error:
                raise DoubleUsageError(f"bsub: bad #BSUB line: {stripped} ({error})",
                                       255) from None
            options += parse_options(words, "directive")[0]
        elif stripped.startswith("#"):
            continue
        else:
            break
    return options


# --------------------------------------------------------------------------- bsub

def _output_path(path: str, key: str, index: int, suffix: str, cwd: str) -> str:
    path = path.replace("%J", key).replace("%I", str(index))
    if not os.path.isabs(path):
        path = os.path.join(cwd, path)
    if path.endswith("/") or os.path.isdir(path):
        name = f"{key}{suffix}" if index == 0 else f"{key}_{index}{suffix}"
        path = os.path.join(path, name)
    return path


def _job_environment(env_option: str | None) -> dict[str, str]:
    if env_option is None or env_option.startswith("all"):
        env = dict(os.environ)
        extra = env_option.split(",")[1:] if env_option else []
    elif env_option == "none":
        env, extra = {}, []
    else:
        env, extra = dict(os.environ), env_option.split(",")
    for item in extra:
        item = item.strip()
        if item.startswith("~"):
            env.pop(item[1:], None)
        elif "=" in item:
            name, value = item.split("=", 1)
            env[name] = value
    return env


def bsub(argv: list[str]) -> int:
    """Submit one job or job array; the script comes on stdin (or a command is given)."""
    store = StateStore.from_env("HYBRID_LSF_DOUBLE_STATE")
    store.log_call("bsub", argv)
    command_line, command = parse_options(argv, "command line")
    script = shlex.join(command) + "\n" if command else sys.stdin.read()
    options = parse_directives(script) + command_line
    settings = dict(options)
    name, indices = parse_job_name(settings.get("-J", "NONAME"))
    if not command and "-J" not in settings:
        name = "NONAME"
    queue = settings.get("-q", DEFAULT_QUEUE).split()[0]
    slots = int(settings.get("-n", "1").split(",")[0])
    cwd = settings.get("-cwd", os.getcwd())
    user = getpass.getuser()
    with store.lock():
        key = str(store.next_sequence(5001))
        elements, element_env = {}, {}
        for index in indices or [0]:
            out_option = settings.get("-oo", settings.get("-o"))
            err_option = settings.get("-eo", settings.get("-e"))
            stdout = (_output_path(out_option, key, index, ".out", cwd) if out_option
                      else str(store.root / f"mail-{key}-{index}.txt"))
            stderr = _output_path(err_option, key, index, ".err", cwd) if err_option else None
            elements[str(index)] = new_element(index, "-H" in settings, stdout, stderr)
            element_env[str(index)] = {"LSB_JOBINDEX": str(index)}
        env = {**_job_environment(settings.get("-env")),
               "LSB_JOBID": key, "LSB_JOBNAME": settings.get("-J", name), "LSB_QUEUE": queue,
               "LSB_HOSTS": " ".join(["localhost"] * slots),
               "LSB_MCPU_HOSTS": f"localhost {slots}", "LSB_DJOB_NUMPROC": str(slots),
               "LSB_SUB_HOST": socket.gethostname(), "LS_SUBCWD": os.getcwd(),
               "LSB_JOBFILENAME": str(store.script_path(key))}
        if indices:
            env["LSB_JOBINDEX_END"] = str(max(indices))
        store.script_path(key).write_text(script)
        store.save({
            "key": key, "system": "lsf", "id": key, "array": indices is not None,
            "name": name, "description": settings.get("-Jd", ""), "queue": queue,
            "user": user, "project": settings.get("-P", "default"), "slots": slots,
            "options": options, "submit_time": time.time(), "cwd": cwd, "env": env,
            "element_env": element_env, "elements": elements, "shell": "/bin/sh",
            "append_output": "-oo" not in settings and "-eo" not in settings,
            "command": script.splitlines()[0] if script else "",
            "start_delay": float(os.environ.get("HYBRID_LSF_DOUBLE_START_DELAY", "0")),
            "kill_delay": float(os.environ.get("HYBRID_LSF_DOUBLE_TERMINATE_INTERVAL", "10")),
        })
    start_elements(store, key)
    where = f"queue <{queue}>" if "-q" in settings else f"default queue <{queue}>"
    print(f"Job <{key}> is submitted to {where}.")
    return 0


# --------------------------------------------------------------------------- bjobs

def _stat(job: dict[str, Any], element: dict[str, Any]) -> str:
    state = element["state"]
    if state == HELD:
        return "PSUSP"
    if state == QUEUED:
        return "PEND"
    if state in (RUNNING, EXITING):
        return "RUN"
    return "DONE" if element["returncode"] == 0 and not element["deleted"] else "EXIT"


def _lsf_time(seconds: float | None) -> str:
    return time.strftime("%b %d %H:%M", time.localtime(seconds)) if seconds else ""


def element_fields(job: dict[str, Any], element: dict[str, Any]) -> dict[str, str]:
    """Every -o field of one element, as LSF prints them (all strings)."""
    stat = _stat(job, element)
    code = element["returncode"]
    exit_code = "" if code in (None, 0) else str(128 - code if code < 0 else code)
    reason = {"PEND": "New job is waiting for scheduling;",
              "PSUSP": "The job was suspended by the user while pending;"}.get(stat, "")
    index = element["index"]
    return {
        "JOBID": job["key"], "JOBINDEX": str(index), "STAT": stat,
        "JOB_NAME": f"{job['name']}[{index}]" if job["array"] else job["name"],
        "JOB_DESCRIPTION": job["description"], "EXIT_CODE": exit_code, "PEND_REASON": reason,
        "QUEUE": job["queue"], "USER": job["user"], "PROJ_NAME": job["project"],
        "FROM_HOST": socket.gethostname(),
        "EXEC_HOST": "localhost" if element["start_time"] else "",
        "SUBMIT_TIME": _lsf_time(job["submit_time"]),
        "START_TIME": _lsf_time(element["start_time"]),
        "FINISH_TIME": _lsf_time(element["end_time"]) + (" L" if element["end_time"] else ""),
        "COMMAND": job["command"], "SLOTS": str(job["slots"]), "NREQ_SLOT": str(job["slots"]),
        "OUTPUT_FILE": element["stdout"], "ERROR_FILE": element["stderr"] or "",
        "PIDS": str(element["pid"] or ""),
    }


def parse_output_format(spec: str) -> tuple[list[tuple[str, int | None]], str | None]:
    """``-o "field[:[-]width] ... [delimiter='c']"`` -> ([(header, width)], delimiter)."""
    delimiter = None
    match = re.search(r"\s*delimiter='(.)'\s*$", spec)
    if match:
        delimiter = match[1]
        spec = spec[:match.start()]
    columns = []
    for word in spec.split():
        field, _, width = word.partition(":")
        if field.lower() not in FIELDS or (width and not re.fullmatch(r"-?\d+[SKMGTPE]?",
                                                                       width)):
            raise DoubleUsageError(f"{word}: Illegal field name or output width.", 255)
        columns.append((FIELDS[field.lower()], abs(int(re.sub(r"\D", "", width)))
                        if width else None))
    if not columns:
        raise DoubleUsageError("bjobs: -o requires at least one field", 255)
    return columns, delimiter


def _select_elements(store: StateStore, ids: list[str], show: str,
                     missing: list[str]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    selected = []
    if not ids:
        for job in store.all_jobs():
            for element in job["elements"].values():
                ended = element["state"] == ENDED
                if show == "all" or (show == "done") == ended:
                    selected.append((job, element))
        return selected
    for job_id in ids:
        match = re.fullmatch(r"(\d+)(?:\[([\d,:-]+)\])?", job_id)
        job = store.load(match[1]) if match else None
        if job is None:
            missing.append(job_id)
            continue
        wanted = parse_index_list(match[2]) if match[2] else None
        found = [e for e in job["elements"].values() if wanted is None or e["index"] in wanted]
        if not found or (wanted is not None and not job["array"]):
            missing.append(job_id)
            continue
        selected += [(job, e) for e in found]
    return selected


def bjobs(argv: list[str]) -> int:
    """``bjobs [-a|-d] [-o fmt] [-json] [-noheader] [-w] [-u user] [ids]``."""
    store = StateStore.from_env(STATE_VARIABLE)
    store.log_call("bjobs", argv)
    flags: set[str] = set()
    output_format = None
    ids: list[str] = []
    words = list(argv)
    while words:
        word = words.pop(0)
        if word in ("-a", "-d", "-json", "-noheader", "-w", "-p", "-r"):
            flags.add(word)
        elif word in ("-o", "-u", "-J", "-q"):
            if not words:
                raise DoubleUsageError(f"bjobs: option requires an argument -- {word[1:]}", 255)
            value = words.pop(0)
            if word == "-o":
                output_format = value
        elif word.startswith("-"):
            raise DoubleUsageError(f"bjobs: illegal option -- {word[1:]}\nUsage: bjobs [-a] "
                                   "[-d] [-o \"fields\"] [-json] [-noheader] [job_ID ...]", 255)
        else:
            ids.append(word)
    if "-json" in flags and output_format is None:
        raise DoubleUsageError("bjobs: -json must be used with -o", 255)
    show = "all" if "-a" in flags else ("done" if "-d" in flags else "unfinished")
    missing: list[str] = []
    with store.lock():
        selected = _select_elements(store, ids, show, missing)
    records = [element_fields(job, element) for job, element in selected]
    if output_format is not None:
        columns, delimiter = parse_output_format(output_format)
    else:
        columns = [(h, None) for h in ("JOBID", "USER", "STAT", "QUEUE", "FROM_HOST",
                                       "EXEC_HOST", "JOB_NAME", "SUBMIT_TIME")]
        delimiter = None
    if not records and not missing:
        print("No job found" if show != "unfinished" else "No unfinished job found",
              file=sys.stderr)
        return 255
    if "-json" in flags:
        rows: list[dict[str, str]] = [{h: r[h] for h, _ in columns} for r in records]
        rows += [{"JOBID": m, "ERROR": f"Job <{m}> is not found"} for m in missing]
        text = json.dumps({"COMMAND": "bjobs", "JOBS": len(rows), "RECORDS": rows},
                          indent=2, separators=(",", ":"))
        print(text.replace("/", "\\/"))
    else:
        lines = []
        if "-noheader" not in flags:
            lines.append([h for h, _ in columns])
        lines += [[r[h] or "-" for h, _ in columns] for r in records]
        for line in lines:
            if delimiter is not None:
                print(delimiter.join(line))
            else:
                cells = zip(line, columns, strict=True)
                print(" ".join(f"{v:<{w or 10}}" for v, (_, w) in cells).rstrip())
        for job_id in missing:
            print(f"Job <{job_id}> is not found", file=sys.stderr)
    return 255 if missing else 0


# --------------------------------------------------------------------------- bkill

def bkill(argv: list[str]) -> int:
    """``bkill [-s signal] ids``: terminate (or signal) exactly these jobs or elements."""
    store = StateStore.from_env(STATE_VARIABLE)
    store.log_call("bkill", argv)
    words = list(argv)
    signal_name = None
    ids: list[str] = []
    while words:
        word = words.pop(0)
        if word == "-s":
            if not words:
                raise DoubleUsageError("bkill: option requires an argument -- s", 255)
            signal_name = words.pop(0)
        elif word.startswith("-"):
            raise DoubleUsageError(f"bkill: illegal option -- {word[1:]}\n"
                                   "Usage: bkill [-s signal_value] job_ID ...", 255)
        else:
            ids.append(word)
    if not ids:
        raise DoubleUsageError("Usage: bkill [-s signal_value] job_ID ...", 255)
    signum = None
    if signal_name is not None:
        name = signal_name.upper()
        try:
            signum = int(name) if name.isdigit() else signal.Signals[
                name if name.startswith("SIG") else "SIG" + name].value
        except KeyError:
            raise DoubleUsageError(f"{signal_name}: Illegal signal value", 255) from None
    status = 0
    for job_id in ids:
        match = re.fullmatch(r"(\d+)(?:\[([\d,:-]+)\])?", job_id)
        job = store.load(match[1]) if match else None
        wanted = parse_index_list(match[2]) if job and match[2] else None
        targets = [] if job is None else [
            e["index"] for e in job["elements"].values()
            if wanted is None or e["index"] in wanted
        ]
        if not targets or (wanted is not None and not job["array"]):
            print(f"Job <{job_id}>: No matching job found", file=sys.stderr)
            status = 255
            continue
        if signum is not None:
            for index in targets:
                pid = job["elements"][str(index)]["pid"]
                if pid and job["elements"][str(index)]["state"] in ACTIVE_STATES:
                    try:
                        os.killpg(pid, signum)
                    except ProcessLookupError:
                        pass
            print(f"Job <{job_id}> is being signaled")
            continue
        results = [request_delete(store, job["key"], index, (signal.SIGINT, signal.SIGTERM))
                   for index in targets]
        if all(r == "ended" for r in results):
            print(f"Job <{job_id}>: Job has already finished", file=sys.stderr)
            status = 255
        else:
            print(f"Job <{job_id}> is being terminated")
    return status


TOOLS = {"bsub": bsub, "bjobs": bjobs, "bkill": bkill}


def main(argv: list[str]) -> int:
    """``lsf_double.py TOOL ARGS...``."""
    if len(argv) < 2 or argv[1] not in TOOLS:
        print(f"usage: lsf_double.py {{{'|'.join(TOOLS)}}} ARGS...", file=sys.stderr)
        return 2
    return run_tool(TOOLS[argv[1]], argv[2:])


if __name__ == "__main__":
    sys.exit(main(sys.argv))
