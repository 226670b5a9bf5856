"""Exceptions of the package: each names the field, the value and what is accepted."""

from __future__ import annotations

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


class WorkersDidNotArrive(HybridError, TimeoutError):
    """Workers did not join in time; the message carries the batch system's reasons."""
