"""The server's log without query strings: a token sent as ``?token=...`` must not be written in
clear.

uvicorn logs each request's path with its query string: HTTP requests on its access logger,
WebSocket handshakes on its error logger. No endpoint reads a query string, so
:class:`DropQueryStrings` replaces every one by ``?…``; :func:`logging_config` is uvicorn's
logging configuration with that filter on both of its handlers.
"""

from __future__ import annotations

import copy
import logging
from typing import Any

from uvicorn.config import LOGGING_CONFIG

HIDDEN = "?…"


def without_query(text: str) -> str:
    """``/path?query`` -> ``/path?…``; text without ``?`` unchanged."""
    path, mark, _ = text.partition("?")
    return path + HIDDEN if mark else text


class DropQueryStrings(logging.Filter):
    """Rewrites the request paths among a record's arguments (always lets the record through)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple):
            record.args = tuple(
                without_query(arg) if isinstance(arg, str) and arg.startswith("/") else arg
                for arg in record.args
            )
        return True


def logging_config() -> dict[str, Any]:
    """uvicorn's default logging configuration, its handlers filtered by
    :class:`DropQueryStrings`."""
    config = copy.deepcopy(LOGGING_CONFIG)
    config.setdefault("filters", {})["drop_query_strings"] = {"()": f"{__name__}.DropQueryStrings"}
    # HTTP requests go to the first, WebSocket handshakes to the second
    for handler in ("access", "default"):
        config["handlers"][handler].setdefault("filters", []).append("drop_query_strings")
    return config
