"""Shared machinery of the PBS and LSF test doubles (``BatchDouble``), not a batch system.

The doubles in ``pbs_double.py`` and ``lsf_double.py`` stand in for the PBS and LSF client
tools, which cannot run on a test machine. They keep their whole state in one directory
(named by ``HYBRID_PBS_DOUBLE_STATE`` / ``HYBRID_LSF_DOUBLE_STATE``) and REALLY run every job
element: a detached *runner* process per element waits out an optional start delay, runs
the job script with ``/bin/sh`` in a new session (its own process group), writes its output
where the directives say, and records the exit status. A removal request signals the
element's process group and, if it is still alive after the kill delay, kills it.

Layout of a state directory::

    lock            flock(2) lock around every read-modify-write
    next_id         the last sequence number handed out
    calls.jsonl     one JSON line per tool invocation: {"tool", "argv", "time"}
    jobs/<seq>.json one job: its attributes and its elements (see :func:`new_element`)
    jobs/<seq>.sh   the job script as submitted
    runner-<seq>-<index>.log  what a runner itself printed (its traceback, if any)

Element states are system-neutral (``queued``, ``held``, ``running``, ``exiting``, ``ended``);
each double maps them to its own words (``Q``/``R``/``X``..., ``PEND``/``RUN``/``DONE``...).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

QUEUED, HELD, RUNNING, EXITING, ENDED = "queued", "held", "running", "exiting", "ended"
ACTIVE_STATES = (QUEUED, HELD, RUNNING, EXITING)
POLL_SECONDS = 0.1


class DoubleUsageError(Exception):
    """A command line or directive the real tool would refuse: message and exit status."""

    def __init__(self, message: str, status: int = 2):
        super().__init__(message)
        self.status = status


class StateStore:
    """The double's state directory: jobs as JSON files, changed under one file lock."""

    def __init__(self, root: str | os.PathLike[str]):
        self.root = Path(root)
        self.jobs_dir = self.root / "jobs"
        self.jobs_dir.mkdir(parents=True, exist_ok=True, mode=0o700)

    @classmethod
    def from_env(cls, variable: str) -> StateStore:
        """The store named by the environment variable ``variable`` (required)."""
        value = os.environ.get(variable)
        if not value:
            raise DoubleUsageError(
                f"test double: set {variable} to the directory that holds its state", 1
            )
        return cls(value)

    @contextlib.contextmanager
    def lock(self) -> Iterator[None]:
        """Hold the store's exclusive lock."""
        with open(self.root / "lock", "a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def next_sequence(self, first: int) -> int:
        """A new sequence number (call with the lock held)."""
        path = self.root / "next_id"
        last = int(path.read_text()) if path.exists() else first - 1
        path.write_text(str(last + 1))
        return last + 1

    def job_path(self, key: str) -> Path:
        return self.jobs_dir / f"{key}.json"

    def script_path(self, key: str) -> Path:
        return self.jobs_dir / f"{key}.sh"

    def load(self, key: str) -> dict[str, Any] | None:
        """One job, or None if the double never had it."""
        path = self.job_path(key)
        if not path.exists():
            return None
        return json.loads(path.read_text())

    def save(self, job: dict[str, Any]) -> None:
        """Write one job atomically (call with the lock held)."""
        path = self.job_path(job["key"])
        temporary = path.with_suffix(".tmp")
        temporary.write_text(json.dumps(job, indent=1, sort_keys=True))
        os.replace(temporary, path)

    def all_jobs(self) -> list[dict[str, Any]]:
        """Every job, in submission order."""
        jobs = [json.loads(p.read_text()) for p in self.jobs_dir.glob("*.json")]
        return sorted(jobs, key=lambda j: int(j["key"]))

    def log_call(self, tool: str, argv: list[str]) -> None:
        """Record one invocation of a tool (what the tests count)."""
        record = {"tool": tool, "argv": argv, "time": time.time()}
        with self.lock(), open(self.root / "calls.jsonl", "a") as handle:
            handle.write(json.dumps(record) + "\n")

    def calls(self, tool: str | None = None) -> list[dict[str, Any]]:
        """Recorded invocations, optionally of one tool."""
        path = self.root / "calls.jsonl"
        if not path.exists():
            return []
        records = [json.loads(line) for line in path.read_text().splitlines() if line]
        return [r for r in records if tool is None or r["tool"] == tool]


def new_element(index: int, held: bool, stdout: str, stderr: str | None) -> dict[str, Any]:
    """One array element (or the single element of a plain job)."""
    return {
        "index": index,
        "state": HELD if held else QUEUED,
        "stdout": stdout,          # file the job's stdout goes to
        "stderr": stderr,          # None: joined into stdout
        "pid": None,               # the job script's process (leader of its process group)
        "runner_pid": None,        # the detached runner that waits for it
        "returncode": None,        # Popen convention: negative means killed by that signal
        "deleted": False,          # removed by qdel/bkill
        "delete_time": None,
        "queue_time": time.time(),
        "start_time": None,
        "end_time": None,
    }


def spawn_runner(store: StateStore, key: str, index: int) -> int:
    """Start the detached runner of one element; returns its pid."""
    log = open(store.root / f"runner-{key}-{index}.log", "ab")
    try:
        process = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), "_run", str(store.root), key,
             str(index)],
            stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True,
            close_fds=True,
        )
    finally:
        log.close()
    return process.pid


def start_elements(store: StateStore, key: str) -> None:
    """Spawn a runner for every queued element of a job and record their pids."""
    with store.lock():
        job = store.load(key)
        assert job is not None
        queued = [int(i) for i, e in job["elements"].items() if e["state"] == QUEUED]
    pids = {index: spawn_runner(store, key, index) for index in queued}
    with store.lock():
        job = store.load(key)
        assert job is not None
        for index, pid in pids.items():
            job["elements"][str(index)]["runner_pid"] = pid
        store.save(job)


def _signal_group(pid: int | None, signum: int) -> None:
    if pid is None:
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signum)


def request_delete(store: StateStore, key: str, index: int,
                   signals: tuple[int, ...]) -> str:
    """Remove one element: ``"deleted"``, ``"exiting"`` (already being removed) or ``"ended"``.

    A queued or held element ends at once without running; a running one gets ``signals``
    sent to its process group and is marked exiting; its runner escalates to SIGKILL after
    the job's kill delay and records the end.
    """
    with store.lock():
        job = store.load(key)
        assert job is not None
        element = job["elements"][str(index)]
        state = element["state"]
        if state == ENDED:
            return "ended"
        if state == EXITING:
            return "exiting"
        element["deleted"] = True
        element["delete_time"] = time.time()
        if state in (QUEUED, HELD):
            element["state"] = ENDED
            element["end_time"] = time.time()
        else:
            element["state"] = EXITING
            for signum in signals:
                _signal_group(element["pid"], signum)
        store.save(job)
        return "deleted"


def _open_output(path: str, append: bool):
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    return open(path, "ab" if append else "wb")


def run_element(store: StateStore, key: str, index: int) -> None:
    """The runner: wait out the start delay, run the script, record how it ended."""
    job = store.load(key)
    if job is None:
        return
    start_at = job["elements"][str(index)]["queue_time"] + float(job.get("start_delay", 0))
    while time.time() < start_at:
        element = (store.load(key) or {}).get("elements", {}).get(str(index), {})
        if element.get("state") != QUEUED:
            return
        time.sleep(POLL_SECONDS)
    with store.lock():
        job = store.load(key)
        assert job is not None
        element = job["elements"][str(index)]
        if element["state"] != QUEUED:
            return
        env = {**job["env"], **job["element_env"][str(index)]}
        stdout = _open_output(element["stdout"], job.get("append_output", True))
        stderr = (_open_output(element["stderr"], job.get("append_output", True))
                  if element["stderr"] else None)
        try:
            process = subprocess.Popen(
                [job["shell"], str(store.script_path(key))], env=env, cwd=job["cwd"],
                stdin=subprocess.DEVNULL, stdout=stdout,
                stderr=stderr if stderr is not None else subprocess.STDOUT,
                start_new_session=True, close_fds=True,
            )
        finally:
            stdout.close()
            if stderr is not None:
                stderr.close()
        element.update(state=RUNNING, pid=process.pid, start_time=time.time())
        store.save(job)
    kill_delay = float(job.get("kill_delay", 10))
    killed = False
    while True:
        returncode = process.poll()
        if returncode is not None:
            break
        if not killed:
            element = (store.load(key) or {})["elements"][str(index)]
            if element["delete_time"] is not None and (
                time.time() - element["delete_time"] >= kill_delay
            ):
                _signal_group(process.pid, signal.SIGKILL)
                killed = True
        time.sleep(POLL_SECONDS)
    # Like the execution daemons, leave nothing of the job's session behind.
    _signal_group(process.pid, signal.SIGKILL)
    with store.lock():
        job = store.load(key)
        assert job is not None
        element = job["elements"][str(index)]
        element.update(state=ENDED, returncode=returncode, end_time=time.time())
        store.save(job)


def process_alive(pid: int | None) -> bool:
    """True while ``pid`` runs (a zombie waiting to be reaped counts as gone)."""
    if pid is None:
        return False
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    return fields[0] not in ("Z", "X")


def job_pids(store: StateStore) -> list[int]:
    """Every runner and job-script pid the double ever started."""
    pids = []
    for job in store.all_jobs():
        for element in job["elements"].values():
            pids += [p for p in (element["pid"], element["runner_pid"]) if p is not None]
    return pids


def run_tool(main, argv: list[str]) -> int:
    """Run a tool's ``main``; a usage error prints its message and returns its status."""
    try:
        return main(argv) or 0
    except DoubleUsageError as error:
        print(str(error), file=sys.stderr)
        return error.status


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "_run":
        run_element(StateStore(sys.argv[2]), sys.argv[3], int(sys.argv[4]))
    else:
        print("usage: batch_double.py _run STATE KEY INDEX", file=sys.stderr)
        sys.exit(2)
