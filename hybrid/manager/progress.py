"""What a person sees while a wait for workers runs: per pool, with the batch system's reasons.

:class:`WaitProgress` draws the state of a wait (workers connected out of how many, and per
pool its jobs by state with the reasons the batch system gives) in one of three ways:

- ``"bar"``: a terminal (stderr is a TTY): a bar and one line per pool, redrawn in place
  whenever anything changes (and every second, for the elapsed time);
- ``"lines"``: anything else (CI logs, files): a plain line each time something changes,
  and one a minute while nothing does, never a control character. A time that only ticks
  (how long the oldest job has pended) is not a change there: it is printed with the next
  line that something else brings;
- ``"notebook"``: a Jupyter kernel: an HTML table updated in place.

Every change is drawn as it happens: a count is never held back to limit redraws.
"""

from __future__ import annotations

import dataclasses
import html
import shutil
import sys
import time
from collections.abc import Mapping
from typing import Any, TextIO

from hybrid.errors import ConfigurationError
from hybrid.manager.pool import PoolStatus

__all__ = ["MODES", "WaitProgress", "pool_line", "progress_mode"]

#: The ways a progress display can draw (``progress=`` of ``wait_for_workers``).
MODES = ("bar", "lines", "notebook")
#: Seconds between "still waiting" lines when nothing changes (``lines`` mode).
QUIET_LINE_EVERY = 60.0
_BAR_WIDTH = 24


def in_notebook() -> bool:
    """True inside a Jupyter kernel (IPython's ZMQ shell), without importing IPython."""
    ipython = sys.modules.get("IPython")
    if ipython is None:
        return False
    try:
        shell = ipython.get_ipython()
    except Exception:
        return False
    return shell is not None and type(shell).__name__ == "ZMQInteractiveShell"


def progress_mode(progress: bool | str | None, stream: TextIO | None = None) -> str | None:
    """The display for ``progress``: ``None``/``True`` pick one, ``False`` shows none.

    Picked: ``"notebook"`` in a Jupyter kernel, ``"bar"`` when ``stream`` (stderr) is a
    terminal, else ``"lines"``.
    """
    if progress is False:
        return None
    if isinstance(progress, str):
        if progress not in MODES:
            raise ConfigurationError("progress", progress,
                                     f"True, False, None (pick one) or one of {list(MODES)}")
        return progress
    if progress is not None and progress is not True:
        raise ConfigurationError("progress", progress,
                                 f"True, False, None (pick one) or one of {list(MODES)}")
    if in_notebook():
        return "notebook"
    stream = sys.stderr if stream is None else stream
    try:
        return "bar" if stream.isatty() else "lines"
    except (AttributeError, ValueError):
        return "lines"


def pool_line(status: PoolStatus, workers: int) -> str:
    """``pool cpu (slurm): 1 running, 2 pending (Resources: 2); target 3; 1 worker``."""
    noun = "worker" if workers == 1 else "workers"
    return f"{status.summary()}; {workers} {noun} connected"


def _steady(status: PoolStatus) -> PoolStatus:
    """``status`` without what only ticks with the time (``lines`` mode compares these).

    How long the oldest job has pended is shown from a minute on
    (:meth:`~hybrid.manager.PoolStatus.summary`) and grows at every poll (``61 s``,
    ``62 s``, ...): here it is the same from that minute on, so that only the other things
    (jobs, reasons, targets, workers) and the minute it first shows count as changes.
    """
    pending = status.oldest_pending
    if pending is None:
        return status
    return dataclasses.replace(status, oldest_pending=60.0 if pending >= 60 else 0.0)


def _seconds(value: float) -> str:
    value = int(value)
    if value < 60:
        return f"{value} s"
    if value < 3600:
        return f"{value // 60} min {value % 60:02d} s"
    return f"{value // 3600} h {value % 3600 // 60:02d} min"


class WaitProgress:
    """The display of one wait for ``n`` workers of ``label`` (a pool, or "all pools").

    Call :meth:`update` with the workers connected so far and each pool's status as often as
    the wait polls; it draws only what changed (and the elapsed time, at most once a second).
    :meth:`close` ends the display with the outcome.
    """

    def __init__(self, n: int, label: str, mode: str, stream: TextIO | None = None,
                 clock: Any = time.monotonic) -> None:
        if mode not in MODES:
            raise ConfigurationError("progress", mode, f"one of {list(MODES)}")
        self.n = n
        self.label = label
        self.mode = mode
        self.stream = stream if stream is not None else sys.stderr
        self._clock = clock
        self.started = clock()
        self.have = -1
        self.lines: list[str] = []
        self._pool_lines: dict[str, str] = {}
        #: ``lines`` mode: each pool's line as of its last change, without ticking times
        self._pool_keys: dict[str, str] = {}
        self._drawn_rows = 0
        self._last_draw = float("-inf")
        self._last_line = self.started
        self._handle: Any = None
        self.closed = False

    # ------------------------------------------------------------------ state
    @property
    def elapsed(self) -> float:
        """Seconds since the wait began."""
        return self._clock() - self.started

    def headline(self) -> str:
        """``workers (all pools): 2/3 connected, 12 s``."""
        return (f"workers ({self.label}): {max(self.have, 0)}/{self.n} connected, "
                f"{_seconds(self.elapsed)}")

    def update(self, have: int, pools: Mapping[str, PoolStatus],
               workers: Mapping[str, int]) -> None:
        """Draw ``have`` of ``n`` workers and each pool's jobs (``workers``: per pool)."""
        if self.closed:
            return
        lines = {name: pool_line(status, workers.get(name, 0))
                 for name, status in pools.items()}
        now = self._clock()
        if self.mode == "lines":
            # a time that only ticks is no change here: a line a second would say nothing
            keys = {name: pool_line(_steady(status), workers.get(name, 0))
                    for name, status in pools.items()}
            if have != self.have or keys != self._pool_keys:
                self._print_changes(have, lines, keys)
            elif now - self._last_line >= QUIET_LINE_EVERY:
                self._write_line(f"{self.headline()} (still waiting)")
            self.have, self._pool_lines, self._pool_keys = have, lines, keys
            return
        changed = have != self.have or lines != self._pool_lines
        if not changed and now - self._last_draw < 1.0:
            return
        self.have, self._pool_lines = have, lines
        self._last_draw = now
        if self.mode == "bar":
            self._draw_bar()
        else:
            self._draw_notebook()

    def close(self, outcome: str = "done") -> None:
        """End the display: ``done`` (all arrived), ``interrupted`` or ``stopped`` (an
        error that the caller reports itself: the display then leaves nothing behind)."""
        if self.closed:
            return
        self.closed = True
        if self.mode == "bar":
            self._clear_bar()
            if outcome == "done":
                self._write(f"workers ({self.label}): {self.have}/{self.n} connected in "
                            f"{_seconds(self.elapsed)}\n")
            elif outcome == "interrupted":  # where it was: the count and each pool's jobs
                self._write("".join(f"{row}\n" for row in [
                    f"workers ({self.label}): interrupted at {max(self.have, 0)}/{self.n} "
                    f"after {_seconds(self.elapsed)}",
                    *(f"  {line}" for line in self._pool_lines.values())]))
        elif self.mode == "lines":
            if outcome == "done":
                self._write_line(f"workers ({self.label}): {self.have}/{self.n} connected in "
                                 f"{_seconds(self.elapsed)}")
            elif outcome == "interrupted":
                self._write_line(f"workers ({self.label}): interrupted at {self.have}/"
                                 f"{self.n} after {_seconds(self.elapsed)}")
        else:
            self._draw_notebook(outcome)

    # ------------------------------------------------------------------ plain lines
    def _print_changes(self, have: int, lines: Mapping[str, str],
                       keys: Mapping[str, str]) -> None:
        if have != self.have and have < self.n:  # the last count: close() says it
            self._write_line(self.headline().replace(
                f"{max(self.have, 0)}/{self.n}", f"{have}/{self.n}", 1))
        for name, line in lines.items():
            if self._pool_keys.get(name) != keys[name]:
                self._write_line(f"  {line}")  # as it is now, times included

    def _write_line(self, text: str) -> None:
        self._last_line = self._clock()
        self.lines.append(text)
        self._write(text + "\n")

    def _write(self, text: str) -> None:
        try:
            self.stream.write(text)
            self.stream.flush()
        except (OSError, ValueError):  # a closed or broken stream: nothing to show it on
            pass

    # ------------------------------------------------------------------ terminal
    def _bar(self) -> str:
        done = min(max(self.have, 0), self.n)
        filled = _BAR_WIDTH * done // self.n if self.n else _BAR_WIDTH
        return "[" + "#" * filled + "-" * (_BAR_WIDTH - filled) + "]"

    def _draw_bar(self) -> None:
        width = max(20, shutil.get_terminal_size((100, 20)).columns - 1)
        rows = [f"{self._bar()} {self.headline()}"] + [f"  {line}" for line in
                                                        self._pool_lines.values()]
        rows = [row if len(row) <= width else row[:width - 3] + "..." for row in rows]
        self.lines = rows
        # back to the first row of the last drawing, then each row over the old one
        out = "\r" + (f"\x1b[{self._drawn_rows - 1}A" if self._drawn_rows > 1 else "")
        out += "\n".join("\x1b[2K" + row for row in rows)
        extra = self._drawn_rows - len(rows)
        if extra > 0:  # a pool line less than before: blank the rows left over
            out += ("\n\x1b[2K" * extra) + f"\x1b[{extra}A"
        self._drawn_rows = len(rows)
        self._write(out)

    def _clear_bar(self) -> None:
        if not self._drawn_rows:
            return
        up = f"\x1b[{self._drawn_rows - 1}A" if self._drawn_rows > 1 else ""
        self._write("\r" + up + "\x1b[J")
        self._drawn_rows = 0

    # ------------------------------------------------------------------ notebook
    def html(self, outcome: str | None = None) -> str:
        """The notebook display: the headline and a table of the pools."""
        state = {None: "waiting", "done": "all connected", "interrupted": "interrupted",
                 "stopped": "stopped"}.get(outcome, outcome or "waiting")
        rows = "".join(
            f"<tr><td style='text-align:left'>{html.escape(line)}</td></tr>"
            for line in self._pool_lines.values())
        done = min(max(self.have, 0), self.n)
        return (
            "<div class='hybrid-wait' style='font-family:monospace'>"
            f"<div><progress value='{done}' max='{self.n}'></progress> "
            f"<b>{html.escape(self.headline())}</b> ({html.escape(state)})</div>"
            f"<table>{rows}</table></div>")

    def _draw_notebook(self, outcome: str | None = None) -> None:
        try:
            from IPython.display import HTML, display
        except ImportError:  # no IPython after all: fall back to lines
            self.mode = "lines"
            return
        content = HTML(self.html(outcome))
        if self._handle is None:
            self._handle = display(content, display_id=True)
        else:
            self._handle.update(content)

