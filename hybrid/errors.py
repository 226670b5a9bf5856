"""Exceptions of the package: each names the field, the value and what is accepted."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


class HybridError(Exception):
    """Base of every error this package raises on purpose."""


class ConfigurationError(HybridError, ValueError):
    """A user-given value is not acceptable. Nothing was started or submitted."""

    def __init__(self, field: str, value: Any, accepted: str, fix: str | None = None):
        self.fix = fix
        self.field = field
        self.value = value
        self.accepted = accepted
        message = f"{field} = {value!r} is not valid: expected {accepted}."
        if fix:
            message += f" {fix}"
        super().__init__(message)

    def __reduce__(self):
        return (type(self), (self.field, self.value, self.accepted, self.fix))


class TemplateError(HybridError, ValueError):
    """A value cannot be made safe for the language of a job template, or a template is broken."""


class BatchError(HybridError, RuntimeError):
    """A batch system refused or failed an operation; the message carries its own words."""


class ToolMissing(BatchError):
    """A batch system's client tool or bindings are not installed here: nothing reached it."""


class WorkersDidNotArrive(HybridError, TimeoutError):
    """Workers did not join in time; the message carries the batch system's reasons."""


class PoolFailed(WorkersDidNotArrive):
    """A pool gave up: its submissions or its jobs kept failing. The message says why."""


class GatewayUnreachable(HybridError, ConnectionError):
    """The dask-gateway server cannot be reached at the address given: nothing was done."""


class ClusterClosed(HybridError, RuntimeError):
    """A call on a cluster that is closed: nothing was done. The message says what to do."""


class CleanupFailed(HybridError):
    """Closing left work behind; the message names the jobs and the command that removes them."""


def did_you_mean(given: str, known: Any) -> str:
    """The fix for a misspelt name: the closest of ``known``, else check the spelling."""
    import difflib

    close = difflib.get_close_matches(given, list(known), n=1, cutoff=0.6)
    return f"Did you mean {close[0]}?" if close else "Check the spelling of the option."


def attach_note(error: BaseException, note: str) -> BaseException:
    """Add ``note`` to ``error`` (``BaseException.add_note`` where Python has it)."""
    add_note = getattr(error, "add_note", None)
    if add_note is not None:
        add_note(note)
    else:  # pragma: no cover - Python 3.10
        error.__notes__ = [*getattr(error, "__notes__", []), note]
    return error


def warn_user(message: str, category: type[Warning] = UserWarning) -> None:
    """Warn, pointing at the caller's own line: the first frame outside hybrid and the
    libraries it drives (a warning in our file tells a user nothing)."""
    import sys
    import warnings

    internal = ("hybrid", "dask_gateway", "distributed", "dask", "tornado", "asyncio",
                "concurrent", "threading", "contextlib", "importlib", "click")
    frame = sys._getframe(1)
    level = 2  # 1 would be this function, 2 its caller
    while frame is not None:
        module = frame.f_globals.get("__name__", "")
        if module.split(".")[0] not in internal:
            break
        frame = frame.f_back
        level += 1
    warnings.warn(message, category, stacklevel=level if frame is not None else 2)


def cleanup_after(error: BaseException | None, cleanup: Callable[[], Any], what: str) -> None:
    """Run ``cleanup``. With ``error`` in flight, a failing cleanup is attached to ``error``
    (as a note: ``while <what> after this error: ...``) and never replaces it; a Ctrl-C
    that stops the cleanup carries ``error`` as its cause, which hybrid's Ctrl-C handler
    still shows."""
    if error is None:
        cleanup()
        return
    try:
        cleanup()
    except Exception as failure:
        attach_note(error, f"while {what} after this error: {failure}")
    except KeyboardInterrupt as interrupt:
        raise interrupt from error
