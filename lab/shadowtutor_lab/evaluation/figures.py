"""Matplotlib figures, headless: written as small PNGs (the benchmarks' plots) or as SVG text (reports)."""

from __future__ import annotations

import io
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


@contextmanager
def figure(**subplots: Any) -> Iterator[tuple[Any, Any]]:
    """``plt.subplots(**subplots)`` on the headless backend for the ``with`` block; always closed after it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(**subplots)
    try:
        yield fig, axes
    finally:
        plt.close(fig)


def _lay_out(fig: Any) -> None:
    """``tight_layout`` unless the figure was made with a layout engine (e.g. ``layout="constrained"``)."""
    if fig.get_layout_engine() is None:
        fig.tight_layout()


@contextmanager
def png_figure(path: Path, dpi: int = 72, **subplots: Any) -> Iterator[tuple[Any, Any]]:
    """``plt.subplots(**subplots)`` for the ``with`` block, then laid out and saved to ``path``; always closed.

    Laid out by ``tight_layout`` unless ``subplots`` chose a layout engine (e.g. ``layout="constrained"``).
    """
    with figure(**subplots) as (fig, axes):
        yield fig, axes
        _lay_out(fig)
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=dpi)


def svg_text(fig: Any) -> str:
    """The figure laid out as an ``<svg>`` element (no XML prolog; text drawn as paths, so no fonts needed)."""
    import matplotlib

    _lay_out(fig)
    buffer = io.StringIO()
    with matplotlib.rc_context({"svg.fonttype": "path", "svg.hashsalt": "shadowtutor"}):
        fig.savefig(buffer, format="svg", metadata={"Date": None})
    text = buffer.getvalue()
    return text[text.index("<svg"):]
