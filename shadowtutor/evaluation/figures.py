"""Matplotlib figures written as small PNGs (headless), shared by the benchmarks' plots."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


@contextmanager
def png_figure(path: Path, dpi: int = 72, **subplots: Any) -> Iterator[tuple[Any, Any]]:
    """``plt.subplots(**subplots)`` for the ``with`` block, then laid out and saved to ``path``; always closed.

    Laid out by ``tight_layout`` unless ``subplots`` chose a layout engine (e.g. ``layout="constrained"``).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(**subplots)
    try:
        yield fig, axes
        if fig.get_layout_engine() is None:
            fig.tight_layout()
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=dpi)
    finally:
        plt.close(fig)
