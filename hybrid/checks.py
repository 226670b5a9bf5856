"""What a self-check returns: one verdict, what was seen, how to fix it.

The value type of every check (a batch system's :meth:`~hybrid.batch.BatchSystem.check`,
the checks of ``hybrid doctor``): defined at the ground floor so that the systems return it
and :mod:`hybrid.admin.doctor` formats it, without either importing the other.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any

__all__ = ["CheckResult", "Status", "fail", "ok", "warn"]


class Status(str, Enum):
    """The verdict of one check."""

    ok = "ok"
    warn = "warn"
    fail = "fail"


@dataclass(frozen=True)
class CheckResult:
    """One check: its name, verdict, what it saw, and the fix when it is not ok."""

    name: str
    status: Status
    message: str
    fix: str | None = None

    @property
    def ok(self) -> bool:
        """Not a failure (a warning passes)."""
        return self.status is not Status.fail

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {"check": self.name, "status": self.status.value, "message": self.message,
                "fix": self.fix}


def ok(name: str, message: str) -> CheckResult:
    """A check that passed."""
    return CheckResult(name, Status.ok, message)


def warn(name: str, message: str, fix: str) -> CheckResult:
    """A check that passed with a warning (and its fix)."""
    return CheckResult(name, Status.warn, message, fix)


def fail(name: str, message: str, fix: str) -> CheckResult:
    """A check that failed (and its fix)."""
    return CheckResult(name, Status.fail, message, fix)
