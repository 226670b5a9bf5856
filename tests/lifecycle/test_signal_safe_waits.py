"""A signal handler that waits on the event loop while the main thread was itself waiting on
it must not deadlock: hybrid's SIGTERM handler closes the open clusters through their loop,
at whatever point the signal interrupted the main thread (CI saw a script stay alive 180 s
after SIGTERM inside ``wait_for_workers``). The old waits (a ``concurrent.futures`` result,
``distributed``'s and dask-gateway's ``sync``) hold a lock that the loop's thread takes to
hand over the result: interrupted there, the handler waited for a loop that waited for it.

Each case runs ``signal_script.py`` (a real ``distributed`` loop; no test double): a few
seconds of waits, interrupted every 0.3 ms by a handler that waits on the loop too.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).with_name("signal_script.py")
REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("kind", ["lifecycle", "gateway", "cluster"])
def test_a_handler_that_waits_on_the_loop_inside_a_wait_does_not_deadlock(kind):
    done = subprocess.run([sys.executable, str(SCRIPT), kind, "3"], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr  # (a deadlock: its stacks)
    _, calls, handled = done.stdout.split()
    assert int(calls) > 100 and int(handled) > 10  # the handler did interrupt the waits
