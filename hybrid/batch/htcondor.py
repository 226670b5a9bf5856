"""HTCondor through the ``htcondor2`` Python bindings (no shelling out to ``condor_submit``).

n workers are n procs of ONE cluster: ``Schedd.submit(Submit(description), spool=True)`` with
``queue n`` in the rendered description, then ``Schedd.spool`` uploads the wrapper and the TLS
files through the schedd (no shared filesystem; the files stay 0600 and the submitter's own).
Jobs carry ``My.<tag> = "<cluster>"`` (and ``<tag>Pool``, ``<tag>Scheduler``) so ``hybrid gc``
and ``connect`` find them again, and ``periodic_remove`` on a lease so none outlives it.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from hybrid.batch.base import (
    BatchSystem,
    JobSpec,
    JobState,
    JobStatus,
    tag_prefix,
    write_private,
)
from hybrid.errors import BatchError
from hybrid.templates import classad_string, render

# HTCondor JobStatus codes.
_IDLE, _RUNNING, _REMOVED, _COMPLETED, _HELD, _TRANSFERRING, _SUSPENDED = 1, 2, 3, 4, 5, 6, 7
_SPOOLING_HOLD_CODE = 16  # held while input files are being spooled: not a failure


def _bindings():
    try:
        import htcondor2
    except ImportError:  # pragma: no cover - depends on the install
        raise BatchError(
            "the HTCondor Python bindings are missing: pip install 'hybrid[htcondor]' "
            "(the 'htcondor' package, module htcondor2)"
        ) from None
    return htcondor2


def condor_state(ad: Any) -> tuple[JobState, str | None]:
    """Map a job ad's JobStatus (and hold/remove/exit details) to a state and a reason."""
    status = int(ad.get("JobStatus", 0))
    if status == _HELD:
        if int(ad.get("HoldReasonCode", 0) or 0) == _SPOOLING_HOLD_CODE:
            return JobState.pending, "spooling input files"
        return JobState.held, str(ad.get("HoldReason", "held (no reason given)"))
    if status in (_IDLE, _SUSPENDED):
        return JobState.pending, None
    if status in (_RUNNING, _TRANSFERRING):
        return JobState.running, None
    if status == _REMOVED:
        return JobState.removed, str(ad.get("RemoveReason", "removed"))
    if status == _COMPLETED:
        code = ad.get("ExitCode")
        if ad.get("ExitBySignal"):
            return JobState.failed, f"killed by signal {ad.get('ExitSignal')}"
        if code not in (None, 0):
            return JobState.failed, f"exit code {code}"
        return JobState.finished, None
    return JobState.pending, None


class HTCondor(BatchSystem):
    """An HTCondor pool reached through the schedd named by the local configuration."""

    name = "htcondor"
    template = "htcondor.sub.j2"
    ships_files = True

    def __init__(self, schedd_name: str | None = None, collector: str | None = None):
        self.schedd_name = schedd_name
        self.collector = collector

    def schedd(self):
        """The ``htcondor2.Schedd`` (the local one unless a name/collector was given)."""
        htcondor2 = _bindings()
        try:
            if self.schedd_name is None and self.collector is None:
                return htcondor2.Schedd()
            collector = htcondor2.Collector(self.collector)
            ad = collector.locate(htcondor2.DaemonType.Schedd, self.schedd_name)
            return htcondor2.Schedd(ad)
        except Exception as error:
            raise BatchError(f"cannot reach the HTCondor schedd: {error}. Check CONDOR_CONFIG "
                             "and that `condor_q` works on this node") from None

    def render_wrapper(self, spec: JobSpec, staging: Path) -> str:
        """The executable each job runs (shell), shipped through the schedd."""
        return render("htcondor-worker.sh.j2", **self.context(spec, staging, 1))

    def submit(self, spec: JobSpec, staging: Path, count: int) -> list[str]:
        """One cluster of ``count`` procs; on any failure the cluster is removed again."""
        htcondor2 = _bindings()
        write_private(staging / "worker.sh", self.render_wrapper(spec, staging), 0o700)
        description = self.render(spec, staging, count)
        try:
            submit = htcondor2.Submit(description)
        except Exception as error:
            raise BatchError(f"HTCondor refused the submit description: {error}") from None
        schedd = self.schedd()
        try:
            result = schedd.submit(submit, spool=True)
        except Exception as error:
            raise BatchError(f"HTCondor submit failed: {error}") from None
        cluster_id = result.cluster()
        try:
            schedd.spool(result)
        except Exception as error:
            self._remove_quietly(schedd, str(cluster_id))
            raise BatchError(f"HTCondor could not receive the job files: {error}") from None
        first = result.first_proc()
        return [f"{cluster_id}.{first + i}" for i in range(result.num_procs())]

    def _remove_quietly(self, schedd: Any, job_spec: Any) -> None:
        htcondor2 = _bindings()
        try:
            schedd.act(htcondor2.JobAction.Remove, job_spec, reason="hybrid: submit failed")
        except Exception:
            pass

    def _projection(self) -> list[str]:
        tag = tag_prefix()
        return ["ClusterId", "ProcId", "JobStatus", "HoldReason", "HoldReasonCode",
                "RemoveReason", "ExitCode", "ExitBySignal", "ExitSignal", tag, f"{tag}Pool",
                f"{tag}Scheduler"]

    def query(self, cluster: str | None = None, job_ids: Iterable[str] | None = None,
              history: bool = False) -> list[JobStatus]:
        """Our jobs from ``Schedd.query`` (and ``Schedd.history`` with ``history``)."""
        tag = tag_prefix()
        ids = list(job_ids) if job_ids is not None else None
        if ids is not None and not ids:
            return []
        constraint = f"{tag} =!= undefined"
        if cluster is not None:
            constraint += f" && {tag} == {classad_string(cluster)}"
        if ids is not None:
            by_cluster: dict[int, list[int]] = defaultdict(list)
            for job_id in ids:
                c, p = job_id.split(".")
                by_cluster[int(c)].append(int(p))
            constraint += " && (" + " || ".join(
                f"ClusterId == {c}" for c in sorted(by_cluster)) + ")"
        schedd = self.schedd()
        projection = self._projection()
        try:
            ads = list(schedd.query(constraint=constraint, projection=projection))
            if history:
                seen = {f"{ad['ClusterId']}.{ad['ProcId']}" for ad in ads}
                missing = [j for j in (ids or []) if j not in seen]
                if missing or ids is None:
                    ads += [ad for ad in schedd.history(constraint=constraint,
                                                        projection=projection, match=10000)
                            if f"{ad['ClusterId']}.{ad['ProcId']}" not in seen]
        except Exception as error:
            raise BatchError(f"HTCondor query failed: {error}") from None
        wanted = set(ids) if ids is not None else None
        out: dict[str, JobStatus] = {}
        for ad in ads:
            job_id = f"{ad['ClusterId']}.{ad['ProcId']}"
            if wanted is not None and job_id not in wanted:
                continue
            state, reason = condor_state(ad)
            out.setdefault(job_id, JobStatus(job_id, state, reason, ad.get(tag),
                                             ad.get(f"{tag}Pool"), ad.get(f"{tag}Scheduler")))
        return list(out.values())

    def remove(self, job_ids: Iterable[str]) -> None:
        """``Schedd.act(Remove, [ids])`` on exactly these jobs."""
        ids = list(job_ids)
        if not ids:
            return
        htcondor2 = _bindings()
        try:
            self.schedd().act(htcondor2.JobAction.Remove, ids, reason="hybrid: worker removed")
        except Exception as error:
            raise BatchError(f"HTCondor remove of {ids} failed: {error}") from None
