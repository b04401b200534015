from __future__ import annotations

import json
from pathlib import Path

from shadowtutor_lab.evaluation.report import render_markdown, write_report

REQUIRED = ("wild_miou", "p1_miou", "p8_miou", "f1_miou", "key_frame_ratio", "mean_distill_steps_partial",
            "mean_distill_steps_full", "distill_step_ms_partial", "distill_step_ms_full", "bytes_per_key_frame")


def _result(wild: float, p8: float) -> dict:
    return {
        "camera": "fixed", "category": "people", "wild_miou": wild, "p1_miou": p8 + 1, "p8_miou": p8,
        "f1_miou": p8 - 1, "key_frame_ratio": 5.0, "key_frame_ratio_p8": 5.5, "key_frame_ratio_full": 6.0,
        "mean_distill_steps_partial": 3.0, "mean_distill_steps_full": 4.0, "distill_step_ms_partial": 12.0,
        "distill_step_ms_full": None, "bytes_per_key_frame": 3_032_000, "bytes_per_key_frame_full": 4_483_000,
    }


def test_markdown_has_the_three_tables_with_averages() -> None:
    results = {"a": _result(10.0, 70.0), "b": _result(20.0, 80.0)}
    meta = {"command": "shadowtutor bench accuracy --scenes a b", "scene_commands": ["shadowtutor scenes make x"],
            "notes": ["timings are noisy"], "plots": {"a": "plots/a.png"}, "size": "320x180",
            "frames_per_scene": 600, "wall_seconds": 61.2, "reused_scenes": ["b"]}
    results["a"]["seconds"] = 30.4
    text = render_markdown(results, meta)
    assert "The first 600 frames of each scene at 320x180" in text
    assert "Harness time per scene (its two passes together): a 30 s." in text
    assert "Wall time of this invocation: 61 s (reused stored traces of b)." in text
    assert "| a | fixed | people | 10.00 | 71.00 | 70.00 | 69.00 |" in text
    assert "| **average** |  |  | 15.00 | 76.00 | 75.00 | 74.00 |" in text
    assert "| 3.032 | 4.483 |" in text  # MB per key frame, partial and full
    assert "| 12.0 | n/a | 3.00 | 4.00 |" in text  # a missing step time is n/a, not 0
    assert "shadowtutor bench accuracy --scenes a b" in text and "shadowtutor scenes make x" in text
    assert "- timings are noisy" in text and "![a](plots/a.png)" in text


def test_write_report_keeps_results_json_to_scenes(tmp_path: Path) -> None:
    results = {"a": _result(10.0, 70.0)}
    write_report(tmp_path / "out", results, {"machine": {"cpu_model": "x"}})
    stored = json.loads((tmp_path / "out" / "results.json").read_text())
    assert list(stored) == ["a"] and all(k in stored["a"] for k in REQUIRED)
    assert json.loads((tmp_path / "out" / "meta.json").read_text())["machine"]["cpu_model"] == "x"
    assert (tmp_path / "out" / "results.md").read_text().startswith("# Accuracy benchmark")


def test_each_scene_stands_beside_the_papers_row_of_its_camera_and_category() -> None:
    results = {"vtest": _result(10.0, 70.0) | {"preset": "real:vtest"},
               "odd": _result(10.0, 60.0) | {"camera": "fixed", "category": "plants", "preset": "real:odd"}}
    text = render_markdown(results, {})
    assert text.startswith("# Accuracy benchmark: the paper's Tables 6, 5 and 2 on real clips\n")
    # ours (P-8, its key frames), then the paper's fixed/people row: Tables 6 and 5, then Table 7 (7 FPS)
    assert "| vtest | fixed | people | 70.00 | 5.50 | 81.39 | 1.96 | 80.08 | 1.97 |" in text
    assert "| odd | fixed | plants | 60.00 | 5.50 | - | - | - | - |" in text
    assert "| **paper's average** |  |  |  |  | 71.29 | 5.38 | 65.31 | 6.32 |" in text
    assert "on generated scenes" in render_markdown({"a": _result(10.0, 70.0)}, {})
