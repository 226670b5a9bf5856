"""What a cluster keeps out of its caller's log: distributed's and bokeh's chatter while it
runs (:func:`quieter`), the listener's lines about the peers that leave with it while it
closes (:class:`DeparturesUnsaid`), and the scheduler's warning that a restart ends workers
without a nanny, which its pools replace (:class:`RestartsExplained`)."""

from __future__ import annotations

import ast
import contextlib
import logging
import re
from collections.abc import Iterator
from typing import TYPE_CHECKING

from hybrid import config
from hybrid.errors import ConfigurationError

if TYPE_CHECKING:
    from distributed import Scheduler


def log_level(value: str | int, field: str) -> int:
    """``value`` (a level's name, any case, or its number) as a logging level number."""
    number = logging.getLevelName(value.upper()) if isinstance(value, str) else value
    if not isinstance(number, int):
        raise ConfigurationError(field, value, "a logging level: 'debug', 'info', 'warning', "
                                 "'error', 'critical' or a number", "False quiets nothing.")
    return number


@contextlib.contextmanager
def quieter(level: int, name: str) -> Iterator[None]:
    """distributed's ``silence_logging_cmgr``, but a handler also on the root logger keeps
    its level: it is the caller's (pytest attaches its caplog handler to every logger that
    does not propagate, ``bokeh`` too), and quieting it would silence everything it hears,
    hybrid's own lines included, for the cluster's whole life."""
    shared = set(logging.getLogger().handlers)
    with contextlib.ExitStack() as restore:
        for handler in logging.getLogger(name).handlers:
            if (isinstance(handler, logging.StreamHandler) and handler not in shared
                    and handler.level != level):
                restore.callback(handler.setLevel, handler.level)
                handler.setLevel(level)
        yield


class DeparturesUnsaid(logging.Filter):
    """While a cluster closes, its scheduler's listener says nothing about the peers that
    leave with it: a worker stopped half-way through opening a connection makes the listener
    warn ``TLS handshake failed ... Connection reset by peer``, which is how a close goes, not
    a fault. Only this scheduler's listener lines, only while it closes (``close()``); shown
    with ``hybrid.logging.verbose``."""

    _LOGGER = "distributed.comm.tcp"

    def __init__(self, scheduler: Scheduler | None) -> None:
        super().__init__()
        self._prefixes = tuple(f"Listener on {listener.listen_address!r}"
                               for listener in getattr(scheduler, "listeners", ()))
        self._active = bool(self._prefixes) and not config.get("logging.verbose", False)
        if self._active:
            logging.getLogger(self._LOGGER).addFilter(self)

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.levelno <= logging.WARNING
                    and record.getMessage().startswith(self._prefixes))

    def close(self) -> None:
        if self._active:
            self._active = False
            logging.getLogger(self._LOGGER).removeFilter(self)


class RestartsExplained(logging.Filter):
    """``client.restart()`` makes a scheduler warn ``Workers [...] do not use a nanny and
    will be terminated without restarting them``: for a pool's workers that is how a restart
    goes (the jobs end and the pool submits new ones), so this scheduler's line becomes an
    INFO line that says so. Workers the scheduler does not hold keep the warning."""

    _LOGGER = "distributed.scheduler"
    _LINE = re.compile(r"^Workers (\[.*\]) do not use a nanny and will be terminated "
                       r"without restarting them$", re.DOTALL)

    def __init__(self, scheduler: Scheduler) -> None:
        super().__init__()
        self._scheduler = scheduler
        logging.getLogger(self._LOGGER).addFilter(self)

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno != logging.WARNING:
            return True
        match = self._LINE.match(record.getMessage())
        if match is None:
            return True
        try:
            addresses = ast.literal_eval(match[1])
        except (ValueError, SyntaxError):
            return True
        if not addresses or not set(addresses) <= set(self._scheduler.workers):
            return True  # another scheduler's, or workers not of this one
        record.msg = (f"Restarting {len(addresses)} worker(s) without a nanny: they end, and "
                      "their pools submit new jobs in their place")
        record.args = ()
        record.levelno, record.levelname = logging.INFO, "INFO"
        return True

    def close(self) -> None:
        logging.getLogger(self._LOGGER).removeFilter(self)


class GathersEnded(logging.Filter):
    """asyncio's "Task exception was never retrieved" for distributed's ``AllExit``: the
    sentinel with which ``Client.gather`` stops waiting, raised in waits nobody reads once a
    close ended the client under them (Ctrl-C inside ``gather``): no one's error. Shown with
    ``hybrid.logging.verbose``."""

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        return not (type(error).__name__ == "AllExit"
                    and type(error).__module__ == "distributed.client"
                    and not config.get("logging.verbose", False))


_GATHERS_ENDED = GathersEnded()


def hush_ended_gathers() -> None:
    """Put :class:`GathersEnded` on asyncio's logger, once for the process (its records
    come when the waits are collected, which may be long after the close)."""
    logger = logging.getLogger("asyncio")
    if _GATHERS_ENDED not in logger.filters:
        logger.addFilter(_GATHERS_ENDED)
