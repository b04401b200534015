"""Timestamped log lines from the ingress and the teaching replicas.

Ray captures a replica's stderr into its worker log (and streams it to the driver's terminal), but
the ``services`` loggers have no handler of their own there, so their lines (moves, retries,
restores) would come without time or level. :func:`configure` gives them one, once per process.
"""

from __future__ import annotations

import logging
import sys

FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
LOGGER = "services"


def configure(level: str) -> logging.Logger:
    """Write the ``services`` loggers' records at ``level`` or above to stderr as ``FORMAT`` lines;
    a second call changes the level only. Returns that logger."""
    logger = logging.getLogger(LOGGER)
    logger.setLevel(level.upper())
    if not any(getattr(h, "_shadowtutor", False) for h in logger.handlers):
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter(FORMAT))
        handler._shadowtutor = True  # type: ignore[attr-defined]
        logger.addHandler(handler)
        # The handler above writes them; the root's (Ray's, without time) would repeat them.
        logger.propagate = False
    return logger
