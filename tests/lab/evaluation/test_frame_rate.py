"""The Table 7 page: two bench accuracy runs paired scene by scene (their output files, written here)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from shadowtutor_cli import main as cli_main
from shadowtutor_lab.evaluation.frame_rate import FrameRateError, write_frame_rate


def write_run(directory: Path, scenes: dict[str, dict[str, Any]], sha: str = "abc", lr: float = 0.01) -> Path:
    directory.mkdir(parents=True)
    (directory / "results.json").write_text(json.dumps(scenes))
    (directory / "meta.json").write_text(json.dumps({
        "command": f"shadowtutor bench accuracy --out {directory}", "scene_commands": ["shadowtutor scenes make ..."],
        "student": {"sha256": sha}, "params": {"learning_rate": lr}, "teacher": "labels"}))
    return directory


def scene(preset: str, seed: int, camera: str, category: str, p1: float, p8: float, keys: float) -> dict[str, Any]:
    return {"preset": preset, "seed": seed, "camera": camera, "category": category, "p1_miou": p1, "p8_miou": p8,
            "key_frame_ratio_p8": keys}


@pytest.fixture
def runs(tmp_path: Path) -> tuple[Path, Path]:
    full = write_run(tmp_path / "runs" / "full", {
        "moving-street-s4": scene("moving-street", 4, "moving", "street", 70.0, 68.0, 10.0),
        "fixed-animals-s1": scene("fixed-animals", 1, "fixed", "animals", 72.0, 69.0, 8.0),
        "only-here": scene("fixed-people", 9, "fixed", "people", 1.0, 1.0, 1.0),
    })
    low = write_run(tmp_path / "runs" / "low", {
        "fixed-animals-s1-7fps": scene("fixed-animals", 1, "fixed", "animals", 62.0, 57.0, 12.0),
        "moving-street-s4-7fps": scene("moving-street", 4, "moving", "street", 61.0, 57.0, 12.5),
    })
    return full, low


def test_scenes_are_paired_by_preset_and_seed_and_their_changes_averaged(runs: tuple[Path, Path],
                                                                        tmp_path: Path) -> None:
    full, low = runs
    out = tmp_path / "pages" / "table7.md"
    averages = write_frame_rate(full, low, out, "Table 7 here")
    assert averages == {"p1_miou": (71.0, 61.5), "p8_miou": (68.5, 57.0), "key_frame_ratio_p8": (9.0, 12.25)}
    text = out.read_text()
    assert text.startswith("# Table 7 here")
    assert "| moving-street-s4 | moving | street | 70.00 | 61.00 | -9.00 | 68.00 | 57.00 | -11.00 | 10.00 | 12.50 " \
           "| +2.50 |" in text
    assert "| **average** |  |  | 71.00 | 61.50 | -9.50 | 68.50 | 57.00 | -11.50 | 9.00 | 12.25 | +3.25 |" in text
    assert "only-here" not in text  # not re-sampled: not compared
    # the paper's rows of the same camera and category (fixed animals: Tables 6-7), and its averages
    assert "| fixed-animals-s1 | fixed | animals | 74.31 | 62.72 | -11.59 | 73.27 | 61.86 | -11.41 | 4.73 | 6.59 " \
           "| +1.86 |" in text
    assert "| **paper's average** |  |  | 72.42 | 66.53 | -5.89 | 71.29 | 65.31 | -5.98 | 5.38 | 6.32 | +0.94 |" in text
    assert "[full](../runs/full/results.md)" in text and "shadowtutor bench accuracy --out" in text


def test_runs_of_other_students_or_parameters_or_no_common_scene_are_refused(runs: tuple[Path, Path],
                                                                             tmp_path: Path) -> None:
    full, _ = runs
    other_student = write_run(tmp_path / "s", {"a": scene("fixed-animals", 1, "fixed", "animals", 1, 1, 1)}, sha="x")
    other_lr = write_run(tmp_path / "l", {"a": scene("fixed-animals", 1, "fixed", "animals", 1, 1, 1)}, lr=0.1)
    elsewhere = write_run(tmp_path / "e", {"a": scene("fixed-animals", 2, "fixed", "animals", 1, 1, 1)})
    for low, message in [(other_student, "differ in student.sha256"), (other_lr, "differ in params"),
                         (elsewhere, "no scene .* in common"), (tmp_path / "absent", "not a bench accuracy output")]:
        with pytest.raises(FrameRateError, match=message):
            write_frame_rate(full, low, tmp_path / "out.md", "t")
    assert not (tmp_path / "out.md").exists()


def test_the_command_prints_the_averages(runs: tuple[Path, Path], tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    full, low = runs
    out = tmp_path / "t7.md"
    assert cli_main(["bench", "frame-rate", "--full", str(full), "--resampled", str(low), "--out", str(out),
                     "--note", "first note", "--note", "second"]) == 0
    printed = capsys.readouterr().out
    assert "P-8: 68.50 at the own rate, 57.00 re-sampled (-11.50)" in printed
    assert "## Notes\n\n- first note\n- second\n" in out.read_text()
    assert f"This page:\n\n```\nshadowtutor bench frame-rate --full {full}" in out.read_text()
