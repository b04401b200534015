"""Progress bars that suit where they are written.

On a terminal, :func:`progress_bar` is an ordinary tqdm bar redrawn in place. Off a terminal (a
log file, a pipe, ``docker logs``) the same bar writes whole lines instead of ``\\r`` redraws: one
at most every :data:`LOG_INTERVAL` seconds and a last one when it closes, so a long run leaves a
few readable lines rather than one line of thousands of updates. tqdm is imported on the first
call (the edge agent, which does not install it, never calls this).
"""

from __future__ import annotations

import sys
from typing import IO, Any

# seconds between two progress lines off a terminal
LOG_INTERVAL = 5.0


class _Lines:
    """A text stream that turns tqdm's ``\\r`` redraws into whole lines on ``stream``."""

    def __init__(self, stream: IO[str]) -> None:
        self.stream = stream

    def write(self, text: str) -> int:
        line = text.replace("\r", "").rstrip()
        if line:
            self.stream.write(line + "\n")
        return len(text)

    def flush(self) -> None:
        self.stream.flush()


def progress_bar(iterable: Any = None, *, file: IO[str] | None = None, **options: Any) -> Any:
    """A ``tqdm(iterable, **options)`` bar on ``file`` (default stderr); redrawn in place when
    ``file`` is a terminal, else written as lines at most every :data:`LOG_INTERVAL` seconds (see
    the module)."""
    from tqdm import tqdm

    stream = sys.stderr if file is None else file
    if not (hasattr(stream, "isatty") and stream.isatty()):
        options.setdefault("mininterval", LOG_INTERVAL)
        options.setdefault("ncols", 100)
        options.setdefault("ascii", True)
        stream = _Lines(stream)
    return tqdm(iterable, file=stream, **options)
