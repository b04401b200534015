"""The paper's Table 7: the same videos at their own frame rate and re-sampled to a lower one.

Pairs two ``bench accuracy`` output folders scene by scene (preset and seed): one run at the
videos' own rate, one on the same videos re-sampled (``scenes make --sample-fps``, ``scenes
make-real --sample-fps``), both with the same student and algorithm parameters; the page shows
P-1, P-8 and the key-frame ratio at both rates and what re-sampling changed, beside the paper's
Tables 5-7.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shadowtutor_lab.evaluation.markdown import markdown_table
from shadowtutor_lab.evaluation.paper_figures import PAPER_AVERAGE, PaperRow, paper_row

# A scene in both runs: its name in the run at the own rate, its results there, and re-sampled
Pairs = list[tuple[str, dict[str, Any], dict[str, Any]]]
# (results.json key, column title) of the figures compared, as in the paper's Table 7
FIGURES = (("p1_miou", "P-1"), ("p8_miou", "P-8"), ("key_frame_ratio_p8", "key frames (%)"))


class FrameRateError(ValueError):
    """The two runs cannot be compared: missing files, other students or parameters, no common scene."""


@dataclass(frozen=True)
class AccuracyRun:
    directory: Path
    results: dict[str, dict[str, Any]]
    meta: dict[str, Any]

    @classmethod
    def read(cls, directory: Path) -> AccuracyRun:
        try:
            results = json.loads((directory / "results.json").read_text())
            meta = json.loads((directory / "meta.json").read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise FrameRateError(f"{directory} is not a bench accuracy output folder: {exc}") from exc
        return cls(directory, results, meta)

    def by_scene(self) -> dict[tuple[str, int], tuple[str, dict[str, Any]]]:
        return {(str(r["preset"]), int(r["seed"])): (name, r) for name, r in self.results.items()}


def _same(full: AccuracyRun, low: AccuracyRun, *path: str) -> None:
    a, b = full.meta, low.meta
    for key in path:
        a, b = a.get(key), b.get(key)
    if a != b:
        raise FrameRateError(f"the runs differ in {'.'.join(path)}: {a!r} in {full.directory}, {b!r} in "
                             f"{low.directory}; compare runs of one student and one set of parameters")


def paired_scenes(full: AccuracyRun, low: AccuracyRun) -> Pairs:
    """(full-rate scene name, its results, the re-sampled scene's results) of each scene in both runs."""
    _same(full, low, "student", "sha256")
    _same(full, low, "params")
    _same(full, low, "teacher")
    low_scenes = low.by_scene()
    pairs = [(name, r, low_scenes[key][1]) for key, (name, r) in full.by_scene().items() if key in low_scenes]
    if not pairs:
        raise FrameRateError(f"{full.directory} and {low.directory} have no scene (preset and seed) in common")
    return pairs


def _cell(value: float | None, signed: bool = False) -> str:
    return "n/a" if value is None else f"{value:+.2f}" if signed else f"{value:.2f}"


def _mean(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return sum(known) / len(known) if known else None


def _compared(pairs: list[tuple[float | None, float | None]]) -> list[float | None]:
    """Each figure at both rates and its change: own, re-sampled, change, own, ..."""
    return [v for a, b in pairs for v in (a, b, None if a is None or b is None else b - a)]


def _cells(values: list[float | None]) -> list[str]:
    return [_cell(v, signed=i % 3 == 2) for i, v in enumerate(values)]


def _paper_values(row: PaperRow) -> list[float | None]:
    return _compared([(row.p1_miou, row.p1_miou_7fps), (row.p8_miou, row.p8_miou_7fps),
                      (row.key_frame_ratio, row.key_frame_ratio_7fps)])


def averages(pairs: Pairs) -> dict[str, tuple[float | None, float | None]]:
    """Each figure's mean over the paired scenes, at the own rate and re-sampled."""
    return {key: (_mean([a.get(key) for _, a, _ in pairs]), _mean([b.get(key) for _, _, b in pairs]))
            for key, _ in FIGURES}


def render_frame_rate(full: AccuracyRun, low: AccuracyRun, pairs: Pairs, title: str, page_dir: Path,
                      notes: Sequence[str] = (), command: str = "") -> str:
    """The Markdown page comparing ``full`` (the videos' own rate) with ``low`` (re-sampled) on their
    ``pairs`` (:func:`paired_scenes`); links are relative to ``page_dir``, the folder the page is written to."""
    header = ["Scene", "Camera", "Category"]
    for _, name in FIGURES:
        header += [f"{name}, own rate", f"{name}, re-sampled", "change"]
    rows, paper = [], []
    for name, at_full, at_low in pairs:
        scene = [name, str(at_full.get("camera", "")), str(at_full.get("category", ""))]
        values = _compared([(at_full.get(key), at_low.get(key)) for key, _ in FIGURES])
        rows.append([*scene, *_cells(values)])
        row = paper_row(at_full.get("camera"), at_full.get("category"))
        paper.append([*scene, *(_cells(_paper_values(row)) if row else ["-"] * len(values))])
    rows.append(["**average**", "", "", *_cells(_compared(list(averages(pairs).values())))])
    paper.append(["**paper's average**", "", "", *_cells(_paper_values(PAPER_AVERAGE))])
    lines = [
        f"# {title}",
        "",
        "The same videos at their own frame rate and re-sampled to a lower one (the paper's Table 7); the same",
        "student and algorithm parameters in both runs; mIoU (%) against each run's teacher, key frames of",
        "partial distillation.",
        "",
        *markdown_table(header, rows),
        "",
        "## The paper's rows of the same camera and category",
        "",
        "LVS videos at 25-30 FPS and re-sampled to 7 FPS, against Mask R-CNN (its Tables 5, 6 and 7).",
        "",
        *markdown_table(header, paper),
        "",
        *(["## Notes", "", *(f"- {note}" for note in notes), ""] if notes else []),
        "## The runs",
        "",
        *_run_lines("Own rate", full, page_dir),
        *_run_lines("Re-sampled", low, page_dir),
        *(["This page:", "", "```", command, "```", ""] if command else []),
    ]
    return "\n".join(lines)


def _run_lines(label: str, run: AccuracyRun, page_dir: Path) -> list[str]:
    link = Path(os.path.relpath(run.directory / "results.md", page_dir)).as_posix()
    return [f"{label}: [{run.directory.name}]({link}), made by", "", "```",
            *run.meta.get("scene_commands", []), run.meta.get("command", ""), "```", ""]


def write_frame_rate(full_dir: Path, low_dir: Path, out: Path, title: str,
                     notes: Sequence[str] = (), command: str = "") -> Mapping[str, Any]:
    """Write the page to ``out`` and return the averages it shows."""
    full, low = AccuracyRun.read(full_dir), AccuracyRun.read(low_dir)
    pairs = paired_scenes(full, low)
    text = render_frame_rate(full, low, pairs, title, out.parent, notes, command)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    return averages(pairs)
