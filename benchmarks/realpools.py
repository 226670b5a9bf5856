"""The real batch systems the benchmarks use: finding them, dask-jobqueue's way into them.

The CI pools (``ci/htcondor/up.sh``, ``ci/slurm/up.sh``, ``ci/sge/up.sh``) write ``env.sh``
files; the benchmarks read them, so ``python -m benchmarks`` works from a plain shell.
dask-jobqueue's HTCondorCluster calls ``condor_submit``/``condor_rm``; on this machine those
tools live only inside the pool's chroot, so :func:`condor_tools` puts two small shims on
``PATH`` that run the pool's own tools there, as the pool's job user (what a submit node
would run).

The pool also has a shared filesystem, as sites do: ``$HYBRID_CONDOR_SHARED_DIR`` is the same
directory at the same path on this host and inside the pool. What a site's user does there
(submit jobs that read their files in place) runs as the pool's job user: :func:`as_pool_user`
(the schedd runs no job as root, so root's private files are no job's to read).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

STATE = Path(os.environ.get("HYBRID_CI_STATE", "/var/tmp/hybrid-ci"))


def source_env(env_file: Path) -> bool:
    """Apply the ``export NAME=value`` lines of a bring-up script's env.sh; False if none."""
    if not env_file.is_file():
        return False
    for line in env_file.read_text().splitlines():
        line = line.strip()
        if line.startswith("export ") and "=" in line:
            name, value = line[len("export "):].split("=", 1)
            os.environ[name] = value.strip().strip('"').strip("'")
    return True


def htcondor_problem() -> str | None:
    """Why the HTCondor pool cannot be used here (``None``: it answers)."""
    if not source_env(STATE / "htcondor" / "env.sh"):
        return (f"no {STATE}/htcondor/env.sh: bring the pool up with "
                "`bash ci/htcondor/up.sh $PWD/.venv` (root)")
    try:
        import htcondor2
    except ImportError:
        return "the htcondor bindings are missing (pip install 'hybrid[htcondor]')"
    htcondor2.reload_config()
    try:
        htcondor2.Schedd().query(constraint="false", projection=["ClusterId"], limit=1)
    except Exception as error:
        return f"the schedd does not answer ({error}); run `bash ci/htcondor/up.sh $PWD/.venv`"
    return None


def slurm_problem() -> str | None:
    """Why Slurm cannot be used here (``None``: it answers)."""
    source_env(STATE / "slurm" / "env.sh")
    if shutil.which("sbatch") is None:
        return "sbatch is not on PATH: bring Slurm up with `bash ci/slurm/up.sh` (root)"
    result = subprocess.run(["squeue", "--noheader", "--jobs=1"], capture_output=True,
                            text=True, timeout=30)
    if result.returncode != 0 and "Invalid job id" not in result.stderr:
        return f"squeue does not answer ({result.stderr.strip()}); run `bash ci/slurm/up.sh`"
    return None


def sge_problem() -> str | None:
    """Why Grid Engine cannot be used here (``None``: it answers)."""
    source_env(STATE / "sge" / "env.sh")
    if shutil.which("qsub") is None or not os.environ.get("SGE_CELL"):
        return "qsub or the cell is missing: bring Grid Engine up with `bash ci/sge/up.sh` (root)"
    result = subprocess.run(["qstat", "-u", "*"], capture_output=True, text=True, timeout=30)
    if result.returncode != 0:
        return f"qstat does not answer ({result.stderr.strip()}); run `bash ci/sge/up.sh`"
    return None


def problem(system: str) -> str | None:
    """Why ``system`` cannot be used here (``None``: it answers)."""
    return {"htcondor": htcondor_problem, "slurm": slurm_problem, "sge": sge_problem}[system]()


def jobqueue_problem() -> str | None:
    """Why dask-jobqueue cannot be the anchor (``None``: it is installed)."""
    try:
        import dask_jobqueue  # noqa: F401
    except ImportError:
        return "dask-jobqueue is not installed (pip install -e '.[bench]')"
    return None


_SUBMIT_SHIM = """#!/bin/bash
# condor_submit FILE, run by the pool's own condor_submit inside its chroot (benchmarks only)
set -euo pipefail
copy=$(mktemp -p {inbox} submit.XXXXXXXX)
cp "${{@: -1}}" "$copy"
chmod 644 "$copy"
cd /tmp
exec env -u CONDOR_CONFIG chroot {chroot} /usr/sbin/runuser -u {user} -- \\
    sh -c 'cd /tmp && exec condor_submit "$@"' sh "${{@:1:$#-1}}" "${{copy#{chroot}}}"
"""

_TOOL_SHIM = """#!/bin/bash
# {tool}, run inside the pool's chroot as its job user (benchmarks only)
exec env -u CONDOR_CONFIG chroot {chroot} /usr/sbin/runuser -u {user} -- {tool} "$@"
"""


@contextlib.contextmanager
def condor_tools() -> Iterator[Path]:
    """``condor_submit``, ``condor_rm`` and ``condor_q`` on ``PATH`` for dask-jobqueue."""
    chroot = Path(os.environ["HYBRID_CONDOR_CHROOT"])
    user = os.environ.get("HYBRID_CONDOR_JOB_USER", "hybridjob")
    inbox = Path(tempfile.mkdtemp(prefix="hybrid-bench-", dir=chroot / "tmp"))
    inbox.chmod(0o755)
    shims = Path(tempfile.mkdtemp(prefix="hybrid-bench-shims-"))
    (shims / "condor_submit").write_text(
        _SUBMIT_SHIM.format(inbox=inbox, chroot=chroot, user=user))
    for tool in ("condor_rm", "condor_q"):
        (shims / tool).write_text(_TOOL_SHIM.format(tool=tool, chroot=chroot, user=user))
    for path in shims.iterdir():
        path.chmod(0o755)
    old = os.environ.get("PATH", "")
    os.environ["PATH"] = f"{shims}:{old}"
    try:
        yield inbox
    finally:
        os.environ["PATH"] = old
        shutil.rmtree(shims, ignore_errors=True)
        shutil.rmtree(inbox, ignore_errors=True)


def pool_user() -> tuple[int, int]:
    """uid and gid of the HTCondor pool's job user (the owner of its home in the chroot)."""
    home = Path(os.environ["HYBRID_CONDOR_CHROOT"]) / "home" / os.environ.get(
        "HYBRID_CONDOR_JOB_USER", "hybridjob")
    info = home.stat()
    return info.st_uid, info.st_gid


def shared_dir() -> Path | None:
    """The HTCondor pool's shared directory (``HYBRID_CONDOR_SHARED_DIR``, else the bring-up
    script's place for it, ``$HYBRID_CONDOR_STATE/shared``), if it is mounted in the pool."""
    given = os.environ.get("HYBRID_CONDOR_SHARED_DIR")
    state = os.environ.get("HYBRID_CONDOR_STATE")
    chroot = os.environ.get("HYBRID_CONDOR_CHROOT")
    path = Path(given) if given else Path(state) / "shared" if state else None
    if path is None or not path.is_dir() or not chroot:
        return None
    inside = chroot + str(path.resolve())
    with open("/proc/mounts") as mounts:  # a bind mount: same device, os.path.ismount misses it
        mounted = any(line.split()[1].encode().decode("unicode_escape") == inside
                      for line in mounts if len(line.split()) > 1)
    return path if mounted else None


def shared_home() -> Path:
    """A new directory of the pool's job user in the pool's shared filesystem (0700).
    Remove it with :func:`shutil.rmtree` (as root) when done."""
    shared = shared_dir()
    if shared is None:
        raise RuntimeError("the HTCondor pool has no shared directory: re-run "
                           "`bash ci/htcondor/up.sh $PWD/.venv` (it adds one)")
    home = Path(tempfile.mkdtemp(prefix="home-", dir=shared))
    os.chown(home, *pool_user())
    return home


def as_pool_user(argv: list[str], home: Path, env: dict[str, str] | None = None) -> list[str]:
    """``argv`` run as the pool's job user, the way a site's user runs on a submit node, with
    ``HOME=home`` and only the environment a client needs (``CONDOR_CONFIG``, ``PATH``,
    ``PYTHONPATH``). The process keeps one capability, to search directories it could not
    otherwise (this machine's python lives under root's 0700 home); the files it writes are
    the job user's, and the jobs run as that user without it."""
    uid, gid = pool_user()
    environment = {"HOME": str(home), "PATH": "/usr/bin:/bin", "LC_ALL": "C.UTF-8",
                   "CONDOR_CONFIG": os.environ["CONDOR_CONFIG"],
                   "PYTHONPATH": os.pathsep.join(
                       p for p in (str(Path(__file__).resolve().parents[1]),
                                   os.environ.get("PYTHONPATH")) if p),
                   **(env or {})}
    return ["setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups",
            "--inh-caps=+dac_read_search", "--ambient-caps=+dac_read_search", "--",
            "env", "-i", *(f"{k}={v}" for k, v in environment.items()), *argv]


def shared_problem() -> str | None:
    """Why the HTCondor pool's shared filesystem cannot be used (``None``: it can)."""
    if shared_dir() is None:
        return ("the HTCondor pool has no shared directory mounted: re-run "
                "`bash ci/htcondor/up.sh $PWD/.venv`, which adds one")
    if shutil.which("setpriv") is None:
        return "setpriv (util-linux) is missing: it runs the pool user's process"
    return None


def run_as_pool_user(benchmark: str, n: int, timeout: float,
                     options: list[str] | None = None) -> dict[str, float]:
    """One repetition of ``benchmark`` (``scale-up``/``submit``) of hybrid with
    ``job_files: shared``, run by the pool's job user in a home of its own in the shared
    filesystem (:mod:`benchmarks._pool_user`, which reads ``options``); its numbers."""
    import json
    import sys

    home = shared_home()
    try:
        argv = [sys.executable, "-m", "benchmarks._pool_user", benchmark, str(n),
                str(home / "jobs"), str(shared_dir()), *(options or [])]
        result = subprocess.run(as_pool_user(argv, home), cwd=Path(__file__).resolve().parents[1],
                                capture_output=True, text=True, timeout=timeout)
    finally:
        shutil.rmtree(home, ignore_errors=True)
    if result.returncode != 0:
        raise RuntimeError(f"the pool user's run failed: {result.stderr.strip()[-600:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def condor_in_queue(constraint: str) -> int:
    """How many jobs matching ``constraint`` are in the schedd's queue (any state)."""
    import htcondor2

    return len(htcondor2.Schedd().query(constraint=constraint, projection=["ProcId"]))


def condor_remove(constraint: str) -> None:
    """Remove every job matching ``constraint`` (benchmark cleanup)."""
    import htcondor2

    with contextlib.suppress(Exception):
        htcondor2.Schedd().act(htcondor2.JobAction.Remove, constraint,
                               reason="hybrid benchmark cleanup")


#: Slurm states in which a job no longer occupies the queue.
SLURM_ENDED = ("COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY",
               "BOOT_FAIL", "DEADLINE", "PREEMPTED", "REVOKED", "SPECIAL_EXIT")


def slurm_in_queue(*, comment_prefix: str | None = None, name: str | None = None) -> int:
    """How many array tasks or jobs, by comment prefix or job name, are still in the queue
    (pending, running, completing...: any state but an ended one)."""
    argv = ["squeue", "--noheader", "--array", "--states=all", "--format=%i|%T|%j|%k"]
    if name is not None:
        argv.append(f"--name={name}")
    out = subprocess.run(argv, capture_output=True, text=True, timeout=60).stdout
    count = 0
    for line in out.splitlines():
        parts = line.split("|", 3)
        if len(parts) != 4:
            continue
        _, state, job_name, comment = parts
        if comment_prefix is not None and not comment.startswith(comment_prefix):
            continue
        if name is not None and job_name != name:
            continue
        if state.strip().split()[0].rstrip("+") not in SLURM_ENDED:
            count += 1
    return count


def slurm_cancel(*, name: str | None = None, comment_prefix: str | None = None) -> None:
    """Cancel the jobs of this name or comment prefix (benchmark cleanup)."""
    if name is not None:
        subprocess.run(["scancel", f"--name={name}"], capture_output=True, timeout=60)
    if comment_prefix is not None:
        out = subprocess.run(["squeue", "--noheader", "--format=%A|%k"], capture_output=True,
                             text=True, timeout=60).stdout
        ids = [line.split("|", 1)[0] for line in out.splitlines()
               if "|" in line and line.split("|", 1)[1].startswith(comment_prefix)]
        if ids:
            subprocess.run(["scancel", *ids], capture_output=True, timeout=60)


def sge_in_queue(*, name: str | None = None, name_prefix: str | None = None) -> int:
    """How many tasks of jobs of this name (or name prefix) are in the Grid Engine queue (any
    state: pending, held, running, being deleted)."""
    import xml.etree.ElementTree as ET

    from hybrid.batch.sge import task_numbers

    out = subprocess.run(["qstat", "-xml", "-g", "d", "-u", "*"], capture_output=True,
                         text=True, timeout=60).stdout
    count = 0
    for entry in ET.fromstring(out).iter("job_list") if out.strip() else []:
        job_name = entry.findtext("JB_name") or ""
        if (name is not None and job_name == name) or (
                name_prefix is not None and job_name.startswith(name_prefix)):
            count += len(task_numbers(entry.findtext("tasks") or "1"))
    return count


def sge_task_listed(job_id: str) -> bool:
    """Whether the task ``JOB.TASK`` is still in the Grid Engine queue."""
    import xml.etree.ElementTree as ET

    from hybrid.batch.sge import task_numbers

    number, _, task = job_id.partition(".")
    out = subprocess.run(["qstat", "-xml", "-g", "d", "-u", "*"], capture_output=True,
                         text=True, timeout=60).stdout
    return any(entry.findtext("JB_job_number") == number
               and task in task_numbers(entry.findtext("tasks") or "1")
               for entry in (ET.fromstring(out).iter("job_list") if out.strip() else []))


def sge_delete(name: str) -> None:
    """Delete the jobs of this name (a wildcard pattern such as ``prefix*`` works too)."""
    subprocess.run(["qdel", name], capture_output=True, timeout=60)


def remove_named(system: str, marker: str) -> None:
    """Remove a benchmark's jobs of ``marker`` (dask-jobqueue's jobs, the floor's)."""
    if system == "htcondor":
        condor_remove(f'BenchMarker == "{marker}"')
    elif system == "slurm":
        slurm_cancel(name=marker)
    else:
        sge_delete(marker)
