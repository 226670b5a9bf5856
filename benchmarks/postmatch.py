"""When the batch system matched a job to a slot, read from the processes it started for it.

The post-match time of a scale-up is the time from the batch system's first match until all n
workers were connected: what is left once the batch system's own cycles (HTCondor's
negotiation, Slurm's scheduling pass) are taken out. The match is seen as the start of the
first process the system starts for one of the jobs, both daemons on this machine:

- HTCondor: the job's ``condor_shadow`` (command line ``condor_shadow CLUSTER.PROC ...``),
  which the schedd starts once the negotiator matched the job and the slot was claimed (a
  shadow the schedd reuses for the next job of the same claim names the job it was started
  for: then the job's ``condor_starter -a SLOT``, which each job gets afresh, stands in);
- Slurm: the job's ``slurmstepd: [JOBID.batch]``, which slurmd starts once the job is
  allocated (array tasks have job ids of their own: ``squeue --format=%A``);
- Grid Engine: the task's ``sge_shepherd``, which sge_execd starts once the task is
  dispatched; its command line names no job, its working directory does
  (``.../active_jobs/JOB.TASK``).

Both live while the job runs, so they are read right after the workers connected (outside
the timed part). Process start times come from ``/proc/PID/stat`` in clock ticks since boot
(10 ms here); :func:`now` reads the same clock (``CLOCK_BOOTTIME``).
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

_TICKS = os.sysconf("SC_CLK_TCK")


def now() -> float:
    """Seconds since boot: the clock process start times are given in."""
    return time.clock_gettime(time.CLOCK_BOOTTIME)


def registered(client: Any, n: int, noticed: float) -> float:
    """When the scheduler registered the ``n``-th worker, in :func:`now`'s clock: its own
    ``add-worker`` events (scheduler and benchmark share this machine's clock), not when
    ``client.wait_for_workers`` noticed, which asks only every 0.1 s, so that a variant whose
    first match keeps one phase of that polling gains or loses up to 0.1 s. ``noticed``
    (the :func:`now` at which the wait returned) bounds it, and stands in without events."""
    events = client.get_events("all")
    times = sorted(t for t, message in events
                   if isinstance(message, dict) and message.get("action") == "add-worker")
    if len(times) < n:
        return noticed
    return min(times[n - 1] + (now() - time.time()), noticed)


def _start(pid: str) -> float | None:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return int(fields[19]) / _TICKS


def _processes() -> Iterable[tuple[str, str]]:
    """(pid, command line) of every process."""
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/cmdline", "rb") as f:
                line = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        yield entry.name, line


_SHADOW = re.compile(r"^(?:\S*/)?condor_shadow (\d+\.\d+) ")
_STARTER = re.compile(r"^(?:\S*/)?condor_starter .*-a (\S+)")
_STEPD = re.compile(r"^slurmstepd: \[(\d+)\.batch\]")
_SHEPHERD = re.compile(r"^(?:\S*/)?sge_shepherd\b")


def _cwd_name(pid: str) -> str:
    try:
        return os.path.basename(os.readlink(f"/proc/{pid}/cwd"))
    except OSError:
        return ""


def first_match(system: str, job_ids: Iterable[str]) -> float | None:
    """When the first of these jobs was matched (see the module's docstring), in
    :func:`now`'s clock; ``None`` when none of their processes is found.

    ``job_ids``: HTCondor ``CLUSTER.PROC`` or ``CLUSTER.PROC@SLOT`` (the slot from the job's
    ``RemoteHost``: :func:`condor_job_ids`); Slurm the job ids ``squeue --format=%A`` lists;
    Grid Engine ``JOB.TASK`` (:func:`sge_job_ids`).
    """
    wanted = {j.split("@", 1)[0] for j in job_ids}
    slots = {j.split("@", 2)[1] for j in job_ids if "@" in j}
    starts = []
    for pid, line in _processes():
        if system == "htcondor":
            shadow, starter = _SHADOW.match(line), _STARTER.match(line)
            ours = (shadow is not None and shadow.group(1) in wanted) or (
                starter is not None and starter.group(1) in slots)
        elif system == "sge":
            ours = _SHEPHERD.match(line) is not None and _cwd_name(pid) in wanted
        else:
            stepd = _STEPD.match(line)
            ours = stepd is not None and stepd.group(1) in wanted
        if ours and (start := _start(pid)) is not None:
            starts.append(start)
    return min(starts) if starts else None


def condor_job_ids(constraint: str) -> list[str]:
    """``CLUSTER.PROC@SLOT`` (``CLUSTER.PROC`` while not running) of the jobs matching
    ``constraint`` in the schedd's queue."""
    import htcondor2

    return [f"{ad['ClusterId']}.{ad['ProcId']}"
            + (f"@{ad['RemoteHost']}" if ad.get("RemoteHost") else "")
            for ad in htcondor2.Schedd().query(
                constraint=constraint, projection=["ClusterId", "ProcId", "RemoteHost"])]


def slurm_job_ids(*, name: str | None = None, comment_prefix: str | None = None) -> list[str]:
    """The job ids (one per array task, ``%A``) of the jobs of this name or comment prefix."""
    import subprocess

    out = subprocess.run(["squeue", "--noheader", "--array", "--format=%A|%j|%k"],
                         capture_output=True, text=True, timeout=60).stdout
    ids = []
    for line in out.splitlines():
        parts = line.split("|", 2)
        if len(parts) != 3:
            continue
        job_id, job_name, comment = parts
        if name is not None and job_name != name:
            continue
        if comment_prefix is not None and not comment.startswith(comment_prefix):
            continue
        ids.append(job_id.strip())
    return ids


def sge_job_ids(*, name: str | None = None, name_prefix: str | None = None) -> list[str]:
    """``JOB.TASK`` of every task of the Grid Engine jobs of this name (or name prefix)."""
    import subprocess
    import xml.etree.ElementTree as ET

    from hybrid.batch.sge import task_numbers

    out = subprocess.run(["qstat", "-xml", "-g", "d", "-u", "*"], capture_output=True,
                         text=True, timeout=60).stdout
    ids = []
    for entry in ET.fromstring(out).iter("job_list") if out.strip() else []:
        job_name = entry.findtext("JB_name") or ""
        if (name is not None and job_name == name) or (
                name_prefix is not None and job_name.startswith(name_prefix)):
            number = entry.findtext("JB_job_number")
            ids += [f"{number}.{task}" for task in task_numbers(entry.findtext("tasks") or "1")]
    return ids
