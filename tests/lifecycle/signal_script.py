"""A process whose main thread waits on the event loop (``KIND``'s ``sync``) again and again
while a signal handler, called at any point of those waits, waits on the same loop too, as
hybrid's SIGTERM handler does when it closes the open clusters:
``python signal_script.py KIND SECONDS``. Prints ``ok CALLS HANDLED`` when it is done.

KIND: ``lifecycle`` (:func:`hybrid.lifecycle.sync` on a ``distributed`` loop), ``gateway``
(an :class:`~hybrid.HTCGateway`'s ``sync``; no server is asked anything), ``cluster`` (a
:class:`~hybrid.HybridCluster` without pools: a real scheduler in this process).
"""

import asyncio
import faulthandler
import signal
import sys
import time

kind, seconds = sys.argv[1], float(sys.argv[2])
faulthandler.dump_traceback_later(seconds + 30, exit=True)  # a deadlock: where, then exit 1

if kind == "lifecycle":
    from distributed.utils import LoopRunner

    from hybrid import lifecycle

    runner = LoopRunner(asynchronous=False)
    runner.start()

    def call():
        return lifecycle.sync(runner.loop, asyncio.sleep, 0)
elif kind == "gateway":
    from hybrid import HTCGateway

    gateway = HTCGateway(address="http://127.0.0.1:9")

    def call():
        return gateway.sync(asyncio.sleep, 0)
else:
    from hybrid import HybridCluster

    cluster = HybridCluster(host="127.0.0.1", dashboard_address=None)

    def call():
        return cluster.sync(asyncio.sleep, 0)

handled = 0
busy = False


def handler(signum, frame):
    global busy, handled
    if busy:
        return
    busy = True
    try:
        handled += 1
        call()
    finally:
        busy = False


signal.signal(signal.SIGALRM, handler)
signal.setitimer(signal.ITIMER_REAL, 0.0003, 0.0003)
calls = 0
started = time.monotonic()
while time.monotonic() - started < seconds:
    call()
    calls += 1
signal.setitimer(signal.ITIMER_REAL, 0)
faulthandler.cancel_dump_traceback_later()
print(f"ok {calls} {handled}", flush=True)
if kind == "cluster":
    cluster.close()
