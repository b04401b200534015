from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import pytest

from shadowtutor_lab.evaluation.figures import png_figure


def test_the_figure_is_written_as_png_and_closed(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "plot.png"
    with png_figure(path, ncols=2) as (fig, axes):
        axes[0].plot([0, 1], [1, 0])
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not plt.fignum_exists(fig.number)


def test_a_failing_drawing_writes_nothing_and_still_closes(tmp_path: Path) -> None:
    path = tmp_path / "plot.png"
    with pytest.raises(RuntimeError), png_figure(path) as (fig, _):
        raise RuntimeError("drawing failed")
    assert not path.exists() and not plt.fignum_exists(fig.number)


def test_a_chosen_layout_engine_is_kept(tmp_path: Path) -> None:
    with png_figure(tmp_path / "plot.png", layout="constrained") as (fig, axis):
        axis.plot([0, 1])
        fig.legend(["line"], loc="outside upper center")
    assert (tmp_path / "plot.png").stat().st_size > 0


def test_svg_text_is_an_svg_element_without_prolog_or_date() -> None:
    from shadowtutor_lab.evaluation.figures import figure, svg_text

    with figure() as (fig, axis):
        axis.plot([0, 1], [1, 0])
        text = svg_text(fig)
    assert text.startswith("<svg") and text.rstrip().endswith("</svg>")
    assert "<?xml" not in text and "<dc:date>" not in text
    assert not plt.fignum_exists(fig.number)
