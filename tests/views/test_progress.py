"""Progress on waits: every change drawn at once, per pool with the batch system's reasons.

The cluster tests run real local-pool workers (``dask worker`` processes); the display tests
drive :class:`~hybrid.manager.progress.WaitProgress` with a clock of their own.
"""

from __future__ import annotations

import io
import re

import pytest

from hybrid import HybridCluster
from hybrid.errors import ConfigurationError, WorkersDidNotArrive
from hybrid.manager import PoolStatus
from hybrid.manager.progress import WaitProgress, progress_mode

pytestmark = pytest.mark.timeout(180)


def test_a_wait_shows_the_workers_already_there_at_once(staging, capsys) -> None:
    """Issue 23 item 2: wait_for_workers(3, 10) with 2 workers joined showed 0/3 throughout."""
    with HybridCluster() as cluster:
        cluster.add_pool("cpu", "local", nanny=False)
        cluster.scale(2)
        cluster.wait_for_workers(2, timeout=60, progress=False)
        capsys.readouterr()
        with pytest.raises(WorkersDidNotArrive, match="at most 2"):  # (at once)
            cluster.wait_for_workers(3, timeout=3, progress=True)
        shown = capsys.readouterr().err
    assert "2/3" in shown, shown
    assert "0/3" not in shown, shown
    # per pool, with the jobs' states
    assert "pool cpu (local): 2 running" in shown, shown


def test_a_worker_that_joins_right_after_a_redraw_is_shown(staging, capsys) -> None:
    """Issue 23 item 2: a worker that joined within a second of the last redraw was never
    shown; the last count drawn is the one that ended the wait."""
    with HybridCluster() as cluster:
        cluster.add_pool("cpu", "local", nanny=False)
        cluster.scale(2)
        cluster.wait_for_workers(2, timeout=60, progress=False)
        cluster.scale(3)
        capsys.readouterr()
        cluster.wait_for_workers(3, timeout=60, progress=True)
        shown = capsys.readouterr().err
    assert re.search(r"workers \(cpu\): 3/3 connected in \d+ s", shown), shown


def _status(pending: int = 0, running: int = 0, reason: str | None = None) -> PoolStatus:
    return PoolStatus(name="gpu", system="htcondor", resource="GPU", target=3,
                      jobs={"pending": pending, "running": running, "held": 0, "removing": 0},
                      reasons={"pending": {reason: pending}} if reason else {})


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_terminal_bar_redraws_every_change_in_place() -> None:
    clock, out = Clock(), io.StringIO()
    display = WaitProgress(3, "gpu", "bar", out, clock=clock)
    display.update(0, {"gpu": _status(3, 0, "Resources")}, {"gpu": 0})
    clock.now += 0.05  # far less than a second later: still drawn
    display.update(1, {"gpu": _status(2, 1, "Resources")}, {"gpu": 1})
    drawn = out.getvalue()
    assert "0/3 connected" in drawn and "1/3 connected" in drawn
    assert "2 pending (Resources: 2)" in drawn
    # the second drawing goes back up over the first (two rows: headline and pool)
    assert "\x1b[1A" in drawn and drawn.count("\x1b[2K") == 4
    before = out.getvalue()
    display.update(1, {"gpu": _status(2, 1, "Resources")}, {"gpu": 1})
    assert out.getvalue() == before, "nothing changed within the second: nothing drawn"
    clock.now += 5
    display.update(3, {"gpu": _status(0, 3)}, {"gpu": 3})
    display.close("done")
    assert out.getvalue().endswith("workers (gpu): 3/3 connected in 5 s\n")


def test_the_terminal_bar_interrupted_says_where_the_wait_was() -> None:
    """Ctrl-C during a wait in a terminal: the bar is cleared, and what stays says where the
    wait was (the count and each pool's jobs), as docs/views.md promises; it left nothing."""
    clock, out = Clock(), io.StringIO()
    display = WaitProgress(3, "gpu", "bar", out, clock=clock)
    display.update(1, {"gpu": _status(2, 1, "Resources")}, {"gpu": 1})
    clock.now += 7
    display.close("interrupted")
    after = out.getvalue().rsplit("\x1b[J", 1)[-1]  # (what the terminal shows after clearing)
    assert after == ("workers (gpu): interrupted at 1/3 after 7 s\n"
                     "  pool gpu (htcondor): 2 pending (Resources: 2), 1 running; target 3; "
                     "1 worker connected\n"), after


def test_plain_lines_for_logs_say_each_change_once_without_control_characters() -> None:
    clock, out = Clock(), io.StringIO()
    display = WaitProgress(2, "all pools", "lines", out, clock=clock)
    for _ in range(3):
        display.update(0, {"gpu": _status(2, 0, "Resources")}, {"gpu": 0})
    clock.now += 61
    display.update(0, {"gpu": _status(2, 0, "Resources")}, {"gpu": 0})
    display.update(1, {"gpu": _status(1, 1, "Resources")}, {"gpu": 1})
    display.close("interrupted")
    text = out.getvalue()
    assert "\x1b" not in text and "\r" not in text
    assert text.splitlines() == [
        "workers (all pools): 0/2 connected, 0 s",
        "  pool gpu (htcondor): 2 pending (Resources: 2); target 3; 0 workers connected",
        "workers (all pools): 0/2 connected, 1 min 01 s (still waiting)",
        "workers (all pools): 1/2 connected, 1 min 01 s",
        "  pool gpu (htcondor): 1 pending (Resources: 1), 1 running; target 3; 1 worker "
        "connected",
        "workers (all pools): interrupted at 1/2 after 1 min 01 s",
    ]


def _pending_for(seconds: float, reason: str = "Resources") -> PoolStatus:
    return PoolStatus(name="cpu", system="sge", resource="CPU", target=1,
                      jobs={"pending": 1, "running": 0, "held": 0, "removing": 0},
                      reasons={"pending": {reason: 1}}, oldest_pending=seconds)


def test_plain_lines_do_not_count_a_ticking_pending_time_as_a_change() -> None:
    """Audit (busy batch, e3): a job pending for 135 s, polled each second, printed 61
    nearly identical lines ("the oldest pending for 60 s", "61 s", ... "120 s"): the
    ticking time counted as a change. Now: a line when something else changes, one a
    minute while nothing does."""
    clock, out = Clock(), io.StringIO()
    display = WaitProgress(1, "cpu", "lines", out, clock=clock)
    for second in range(136):
        clock.now = 100.0 + second
        reason = "Resources" if second < 130 else "execution time not reached"
        display.update(0, {"cpu": _pending_for(second, reason)}, {"cpu": 0})
    display.close("interrupted")
    assert out.getvalue().splitlines() == [
        "workers (cpu): 0/1 connected, 0 s",
        "  pool cpu (sge): 1 pending (Resources: 1); target 1; 0 workers connected",
        # the minute it first shows is news; 61 s, 62 s, ... are not
        "  pool cpu (sge): 1 pending (Resources: 1), the oldest pending for 60 s; target 1; "
        "0 workers connected",
        "workers (cpu): 0/1 connected, 2 min 00 s (still waiting)",
        # a change of something else: printed as it is now, its time included
        "  pool cpu (sge): 1 pending (execution time not reached: 1), the oldest pending for "
        "2 min; target 1; 0 workers connected",
        "workers (cpu): interrupted at 0/1 after 2 min 15 s",
    ]


def test_the_terminal_bar_still_shows_the_pending_time_as_it_ticks() -> None:
    clock, out = Clock(), io.StringIO()
    display = WaitProgress(1, "cpu", "bar", out, clock=clock)
    display.update(0, {"cpu": _pending_for(60)}, {"cpu": 0})
    clock.now += 0.2  # within the second: the ticking time is drawn at once all the same
    display.update(0, {"cpu": _pending_for(61)}, {"cpu": 0})
    assert "the oldest pending for 61 s" in display.lines[1]
    assert "the oldest pending for 61 s" in out.getvalue()


def test_a_failed_wait_leaves_the_terminal_clean_for_its_one_error_message() -> None:
    out = io.StringIO()
    display = WaitProgress(2, "gpu", "bar", out, clock=Clock())
    display.update(0, {"gpu": _status(2)}, {"gpu": 0})
    display.close("stopped")
    assert out.getvalue().endswith("\r\x1b[1A\x1b[J")


def test_the_notebook_display_is_an_html_table_updated_in_place() -> None:
    display = WaitProgress(3, "gpu", "notebook", io.StringIO(), clock=Clock())
    display.have, display._pool_lines = 1, {"gpu": "pool gpu (htcondor): 1 running"}
    page = display.html("done")
    assert "<progress value='1' max='3'>" in page and "all connected" in page
    assert "pool gpu (htcondor): 1 running" in page


def test_progress_modes_are_picked_or_refused_clearly() -> None:
    assert progress_mode(False) is None
    assert progress_mode(None, io.StringIO()) == "lines"
    assert progress_mode("bar") == "bar"

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    assert progress_mode(True, Terminal()) == "bar"
    with pytest.raises(ConfigurationError, match="progress"):
        progress_mode("fancy")
    with pytest.raises(ConfigurationError, match="progress"):
        progress_mode(3)  # type: ignore[arg-type]
