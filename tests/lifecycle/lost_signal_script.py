"""A user's script whose main thread sleeps in one long call while a signal that ends the
process is taken by another of its threads: ``python lost_signal_script.py SIGNAL``.

The kernel gives a process-wide signal to any thread that does not block it (a busy
machine's usual case: the main thread had just been given another, or the signal came
between Python's last look and the start of the main thread's ``sleep``). CPython then only
sets its flag: the main thread runs the handler when its call returns, here in ten minutes.
This script makes that happen every time: once the main thread sleeps, one of its own
threads sends the signal to itself (``signal.pthread_kill``).

It prints ``phase start``, ``phase sleep`` and ``phase sent``; nothing in it is a test
double (a real local pool of one real worker).
"""

import faulthandler
import signal
import sys
import threading
import time

from hybrid import HybridCluster

signum = getattr(signal, sys.argv[1])
signal.signal(signal.SIGHUP, signal.SIG_DFL)  # (as a terminal gives them, whatever CI has)
signal.signal(signal.SIGINT, signal.default_int_handler)
faulthandler.register(signal.SIGUSR1, all_threads=True)  # the test asks where it hangs
main = threading.main_thread().ident


def say(what):
    print(f"phase {what}", flush=True)


def main_sleeps() -> bool:
    frame = sys._current_frames().get(main)
    return frame is not None and frame.f_code.co_name == "<module>" and \
        frame.f_lineno == SLEEP_LINE


def take_the_signal() -> None:
    """Once the main thread is inside its long sleep (seen twice, 50 ms apart), this thread
    takes the signal."""
    deadline = time.monotonic() + 120
    seen = 0
    while seen < 2 and time.monotonic() < deadline:
        seen = seen + 1 if main_sleeps() else 0
        time.sleep(0.05)
    signal.pthread_kill(threading.get_ident(), signum)
    say("sent")


cluster = HybridCluster(security=True)
cluster.add_pool("cpu", "local", cores=1, nanny=False)
say("start")
cluster.scale(1)
cluster.wait_for_workers(1, 120, progress=False)
threading.Thread(target=take_the_signal, daemon=True).start()
say("sleep")
SLEEP_LINE = sys._getframe().f_lineno + 1
time.sleep(600)
say("woke")
