"""Log lines that carry what an edge sent, bounded per connection and unable to forge a line.

Whatever an edge supplies (an ERROR's code and text, a resync's reason, an edge id, a refusal's
message) goes into a log line only through :func:`edge_text`: characters that are not printable
(newlines, carriage returns, escape sequences, line and paragraph separators) are escaped the way
Python's ``repr`` writes them, and the text is cut to ``MAX_EDGE_TEXT`` characters. So no edge
text can end a log line or start another one.

:class:`EdgeLog` writes one connection's such lines through a token bucket: ``per_minute`` lines a
minute on average, bursts of as many. Lines over it are dropped and counted; the next line that
is written (or :meth:`EdgeLog.close`) is preceded by one summary ``suppressed N log lines``. So
one connection writes at most ``2 x per_minute`` lines in a minute past its first burst.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from services.server.access.limits import TokenBucket

MAX_EDGE_TEXT = 200


def edge_text(value: object, limit: int = MAX_EDGE_TEXT) -> str:
    """``str(value)`` fit for one log line: at most ``limit`` characters of it, every non-printable
    character escaped (``\\n``, ``\\x1b``, ``\\u2028``), then how many characters were cut."""
    text = str(value)
    cut = len(text) - limit
    if cut > 0:
        text = text[:limit]
    escaped = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
    return f"{escaped}... ({cut} more characters)" if cut > 0 else escaped


class EdgeLog:
    """One connection's log lines caused by its edge; see the module's docstring."""

    def __init__(
        self,
        logger: logging.Logger,
        per_minute: int,
        who: Callable[[], str],
        on_drop: Callable[[], None] = lambda: None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``who()`` names the connection's edge in the summary line; ``on_drop()`` is called for
        each line dropped."""
        if per_minute < 1:
            raise ValueError(f"need per_minute >= 1, got {per_minute}")
        self.logger = logger
        self.per_minute = per_minute
        self._who = who
        self._on_drop = on_drop
        self._bucket = TokenBucket(per_minute / 60.0, per_minute, clock)
        # lines dropped since the last summary
        self.suppressed = 0
        self.written = 0

    def log(self, level: int, fmt: str, *args: object) -> bool:
        """Log ``fmt % args`` with every ``str`` argument through :func:`edge_text`, if the bucket
        allows; True when written."""
        if not self.logger.isEnabledFor(level):
            return False
        if not self._bucket.take():
            self.suppressed += 1
            self._on_drop()
            return False
        self._summarise(level)
        clean = tuple(edge_text(a) if isinstance(a, str) else a for a in args)
        self.logger.log(level, fmt, *clean)
        self.written += 1
        return True

    def warning(self, fmt: str, *args: object) -> bool:
        return self.log(logging.WARNING, fmt, *args)

    def info(self, fmt: str, *args: object) -> bool:
        return self.log(logging.INFO, fmt, *args)

    def close(self) -> None:
        """The connection ended: the summary of lines still suppressed, if any."""
        self._summarise(logging.WARNING)

    def _summarise(self, level: int) -> None:
        if self.suppressed:
            self.logger.log(
                level,
                "%s: suppressed %d log lines (over %d a minute)",
                edge_text(self._who()),
                self.suppressed,
                self.per_minute,
            )
            self.suppressed = 0
