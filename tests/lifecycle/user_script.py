"""A user's script, as the lifecycle tests run it: ``python user_script.py KIND PHASE``.

KIND: ``htcondor`` (a HybridCluster with an HTCondor pool), ``gateway-htcondor`` or
``gateway-local`` (an HTCGatewayCluster of the gateway in ``HYBRID_T_GATEWAY`` with an
HTCondor or local pool), ``backend-htcondor`` (openff-evaluator's way: a
``DaskHTCondorBackend`` of two workers; phases ``exit`` and ``sleep`` only). PHASE says
where the script stays (the test signals it there):
``start``, ``wait`` (for a worker that never comes), ``sleep`` (workers joined), ``swallow``
(the same, where the script catches every exception and goes on), ``locked`` (the same,
holding ``distributed``'s event-loop lock, as a Client starting its loop does), ``close``,
``queued`` (jobs that stay in the queue), ``exit`` (ends without close()), ``error`` (raises
inside ``with cluster:``, which closes it), ``gather`` (waits for the results of tasks that
run), ``after-close``
(calls everything on the closed cluster), ``after-close-keep`` (the same after
``close(shutdown=False)``).

It prints ``phase NAME`` before each phase, and nothing else of its own but for
``after-close``: one JSON line of what each call raised. Nothing in it is a test double.
"""

import faulthandler
import json
import os
import signal
import sys
import time

from dask_gateway import BasicAuth

from hybrid import HTCGateway, HybridCluster

kind, phase = sys.argv[1], sys.argv[2]
# SIGHUP as a script run from a terminal has it (SIG_DFL), whatever started the tests (CI
# may run under nohup, whose SIG_IGN every child inherits), or as `nohup` gives it
signal.signal(signal.SIGHUP, signal.SIG_IGN if os.environ.get("HYBRID_T_NOHUP")
              else signal.SIG_DFL)
faulthandler.register(signal.SIGUSR1, all_threads=True)  # the test asks where it hangs


def say(what):
    print(f"phase {what}", flush=True)


def open_cluster():
    if kind == "htcondor":
        cluster = HybridCluster(security=True)
        # "queued": jobs no machine of the pool can run (they wait in the queue)
        cluster.add_pool("cpu", "htcondor", cores=1, nanny=False,
                         memory="4096 GiB" if phase == "queued" else "512 MiB")
        return cluster
    gateway = HTCGateway(address=os.environ["HYBRID_T_GATEWAY"],
                         proxy_address=os.environ["HYBRID_T_PROXY"],
                         auth=BasicAuth(os.environ["HYBRID_T_USER"],
                                        os.environ["HYBRID_T_PASSWORD"]))
    return gateway.new_cluster(pool=kind.split("-", 1)[1], worker_cores=1, worker_memory=0.5)


say("start")
if kind == "backend-htcondor":  # openff-evaluator's way: a backend, started, never stopped
    from hybrid.backends import DaskHTCondorBackend
    from hybrid.resources import QueueWorkerResources

    backend = DaskHTCondorBackend(2, 2, QueueWorkerResources(
        per_thread_memory_limit="512 MiB"), adaptive_interval="0.5s",
        disable_nanny_process=True)
    backend.start()
    say(f"scale {backend.cluster.name}")
    backend.cluster.wait_for_workers(2, 600, progress=False)
    say("sleep")
    if phase == "sleep":
        time.sleep(600)
    sys.exit(0)  # phase "exit": without stop()
cluster = open_cluster()
say(f"scale {cluster.name}")
cluster.scale(2)
if phase == "queued":
    say("queued")
    time.sleep(600)
if phase == "wait":  # a third worker it may get (its adaptive maximum) but never does
    cluster.adapt(minimum=2, maximum=3, interval="0.5s")  # (no task asks for it)
say("wait")
cluster.wait_for_workers(3 if phase == "wait" else 2, 600, progress=False)
say("sleep")
if phase == "sleep":
    time.sleep(600)
if phase == "swallow":  # a framework that catches everything, SystemExit included
    try:
        time.sleep(600)
    except BaseException:
        say("swallowed")
        time.sleep(600)
if phase == "locked":  # as while a Client or cluster starts or stops its event loop
    from distributed.utils import LoopRunner

    with LoopRunner._lock:
        say("locked")
        time.sleep(600)
if phase == "exit":
    sys.exit(0)
if phase == "gather":  # waiting for the results of tasks that run
    import threading

    main = threading.main_thread().ident

    def say_when_waiting():
        """``phase gather`` once the main thread waits inside distributed's ``sync`` for
        the gather it started (a Ctrl-C before that hits distributed's own race, whose
        ``cancel`` then finds no future: not what this phase is for)."""
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            frame = sys._current_frames().get(main)
            while frame is not None and not (frame.f_code.co_name == "sync"
                                             and "future" in frame.f_locals):
                frame = frame.f_back
            if frame is not None:
                return say("gather")
            time.sleep(0.01)
        say("never-waited")  # (the test then reads no "phase gather" and fails)

    client = cluster.get_client()  # (not closed: the cluster's close ends it)
    futures = client.map(time.sleep, [600, 601])
    deadline = time.monotonic() + 120
    while sum(map(len, client.processing().values())) < 2:  # both run
        if time.monotonic() > deadline:
            raise RuntimeError("the two tasks did not both start within 120 s")
        time.sleep(0.05)
    threading.Thread(target=say_when_waiting, daemon=True).start()
    client.gather(futures)
if phase == "error":  # the user's own error inside the with block: leaving it closes
    with cluster:
        say("error")
        raise ValueError("the user's own error")
say("close")
if phase == "after-close-keep":  # a gateway cluster left running for another process
    cluster.close(shutdown=False)
else:
    cluster.close()
if phase.startswith("after-close"):
    calls = {
        "scale": lambda: cluster.scale(2),
        "jobs": lambda: cluster.jobs(),
        "wait_for_workers": lambda: cluster.wait_for_workers(1, 5),
        "connected_workers": lambda: cluster.connected_workers(),
        "add_pool": lambda: cluster.add_pool("more", "local"),
        "get_client": lambda: cluster.get_client(),
        "adapt": lambda: cluster.adapt(maximum=2),
    }
    found = {}
    for name, call in calls.items():
        started = time.monotonic()
        try:
            call()
            found[name] = {"raised": None}
        except Exception as error:
            found[name] = {"raised": type(error).__name__, "message": str(error),
                           "seconds": round(time.monotonic() - started, 2)}
    print(json.dumps(found), flush=True)
say("done")
