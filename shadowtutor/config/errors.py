"""A pydantic :class:`~pydantic.ValidationError` as one line a person can act on (no
pydantic-settings import)."""

from __future__ import annotations

from pydantic import ValidationError
from pydantic_core import ErrorDetails


def error_text(error: ErrorDetails) -> str:
    """One problem's message: a validator's own ValueError text as raised, else pydantic's
    message."""
    cause = (error.get("ctx") or {}).get("error")
    return str(cause) if error["type"] == "value_error" and cause is not None else error["msg"]


def validation_message(exc: ValidationError) -> str:
    """Every problem of ``exc``, ``"; "``-joined: an error located at a field prefixed by the
    field's dotted path, a model-wide one by nothing."""
    lines = []
    for error in exc.errors(include_url=False):
        where = ".".join(str(part) for part in error["loc"])
        lines.append(f"{where}: {error_text(error)}" if where else error_text(error))
    return "; ".join(lines)
