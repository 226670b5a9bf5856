"""Issue 27: does asking the schedd to reschedule after a submission start a job sooner?

``condor_submit`` asks the schedd to reschedule after every submission (the schedd then
sends its idle jobs to the negotiator at once instead of at its next update); the bindings'
``Schedd.submit`` does not. Each sample submits ONE trivial job (it writes a time stamp when
it starts, then waits to be removed) at a random phase of the negotiation cycle and times
submit -> start; the two arms, ``submit`` and ``submit + reschedule``, alternate in a random
order, ``samples`` times each:

- ``idle queue``: the pool as it is;
- ``busy queue``: the same while the queue holds ``BUSY_IDLE`` idle jobs that never match
  (in ``BUSY_KINDS`` autoclusters: different requests) and ``BUSY_RUNNING`` running ones,
  all the benchmark's own, removed after.
"""

from __future__ import annotations

import random
import shutil
import tempfile
import time
import uuid
from pathlib import Path

from benchmarks import realpools
from benchmarks.harness import Results, log, repeat
from benchmarks.launchers import wait_until

#: Jobs of the busy queue: idle ones that never match, in this many autoclusters, and running.
BUSY_IDLE, BUSY_KINDS, BUSY_RUNNING = 400, 40, 8
ARMS = ("submit", "submit + reschedule")


#: How this benchmark's jobs' ``BenchMarker`` starts (the other benchmarks' do not): a test
#: that waits for them to leave the queue waits for these only, not for jobs of a benchmark
#: that runs beside it.
MARKER_PREFIX = "bench-reschedule-"


def one(reschedule: bool, directory: Path, marker: str) -> float:
    """Seconds from one job's submission to its start."""
    import htcondor2

    name = uuid.uuid4().hex[:8]
    stamp = directory / name
    schedd = htcondor2.Schedd()
    description = htcondor2.Submit({
        "universe": "vanilla", "executable": "/bin/sh",
        "arguments": f"\"-c 'date +%s.%N > {stamp}.tmp && mv {stamp}.tmp {stamp} && "
                     "exec sleep 600'\"",
        "initialdir": str(directory), "should_transfer_files": "NO",
        "output": "/dev/null", "error": "/dev/null", "request_cpus": "1",
        "request_memory": "64", "My.BenchMarker": f'"{marker}-{name}"',
        "leave_in_queue": "false"})
    try:
        start = time.time()
        schedd.submit(description)
        if reschedule:
            schedd.reschedule()
        wait_until(stamp.exists, 120, "the job did not start", pause=0.02)
        return float(stamp.read_text()) - start
    finally:
        realpools.condor_remove(f'BenchMarker == "{marker}-{name}"')


def busy_queue(marker: str, directory: Path) -> None:
    """Fill the queue: idle jobs that never match, and running ones."""
    import htcondor2

    schedd = htcondor2.Schedd()
    common = {"universe": "vanilla", "executable": "/bin/sleep", "arguments": "3600",
              "initialdir": str(directory), "should_transfer_files": "NO",
              "output": "/dev/null", "error": "/dev/null", "My.BenchMarker": f'"{marker}"',
              "leave_in_queue": "false"}
    for kind in range(BUSY_KINDS):
        schedd.submit(htcondor2.Submit({**common, "requirements": "false",
                                        "request_memory": str(64 + kind)}),
                      count=BUSY_IDLE // BUSY_KINDS)
    schedd.submit(htcondor2.Submit({**common, "request_cpus": "1", "request_memory": "64"}),
                  count=BUSY_RUNNING)
    wait_until(lambda: len(schedd.query(f'BenchMarker == "{marker}" && JobStatus == 2',
                                        projection=["ProcId"])) >= BUSY_RUNNING,
               180, "the busy queue's running jobs did not start", pause=0.5)


def run(results: Results, samples: int, seed: int | None = None) -> None:
    """Both arms, ``samples`` times each, in an idle and in a busy queue."""
    if problem := realpools.htcondor_problem():
        results.skip("reschedule", problem)
        return
    if problem := realpools.shared_problem():
        results.skip("reschedule", problem)
        return
    from benchmarks.scaleup import negotiation_cycle

    cycle = negotiation_cycle()
    pick = random.Random(seed)
    directory = Path(tempfile.mkdtemp(prefix="bench-resched-", dir=realpools.shared_dir()))
    directory.chmod(0o1777)
    marker = f"{MARKER_PREFIX}{uuid.uuid4().hex[:8]}"
    try:
        for queue in ("idle queue", "busy queue"):
            if queue == "busy queue":
                log(f"reschedule: filling the queue ({BUSY_IDLE} idle, {BUSY_RUNNING} running)")
                busy_queue(f"{marker}-busy", directory)
            for sample in range(samples):
                log(f"reschedule ({queue}): sample {sample + 1} of {samples}")
                for arm in pick.sample(ARMS, len(ARMS)):
                    time.sleep(pick.uniform(0, cycle))  # a random phase of the cycle
                    measure = results.measure("reschedule", "htcondor", queue, arm)
                    repeat(measure, lambda r=arm != "submit": one(r, directory, marker))
    finally:
        realpools.condor_remove(f'regexp("^{marker}", BenchMarker)')
        shutil.rmtree(directory, ignore_errors=True)
