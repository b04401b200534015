from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from shadowtutor_lab.evaluation.traffic import verdict
from shadowtutor_lab.evaluation.traffic_report import render_markdown, write_report


def setting(label: str, frame: float, update: float, diffs: dict[str, float]) -> dict[str, Any]:
    scenes = {
        name: {"miou": 60.0 + d, "miou_uncompressed": 60.0, "miou_difference": d, "key_frames": 38,
               "mean_steps": 7.5, "frame_bytes_720p": frame, "frame_encode_ms_720p": 3.0, "update_bytes": update,
               "update_bytes_max": update + 1000, "key_frame_bytes_720p": frame + update}
        for name, d in diffs.items()
    }
    mean = {"miou": 60.0, "miou_difference": sum(diffs.values()) / len(diffs), "frame_bytes_720p": frame,
            "frame_encode_ms_720p": 3.0, "update_bytes": update, "key_frame_bytes_720p": frame + update,
            "worst_miou_difference": min(diffs.values()), "largest_key_frame_bytes_720p": frame + update}
    result = {"label": label, "link": {}, "scenes": scenes, "mean": mean}
    result["verdict"] = verdict(result)
    return result


def results(default_frame: float, diffs: dict[str, float] | None = None) -> dict[str, Any]:
    return {
        "meta": {"command": "shadowtutor bench traffic --scenes a b", "scene_commands": ["shadowtutor scenes make a"],
                 "size": "320x180", "frames_per_scene": {"a": 300, "b": 300}, "setting": "P-8", "teacher": "labels",
                 "backend": "onnx", "workers": 2, "frame_samples": 10, "student": {"path": "s.pt", "sha256": "ab" * 32},
                 "machine": {"cpu_model": "test CPU"}, "wall_seconds": 600.0, "runs": 4,
                 "runs_reused": 0, "run_seconds": 1200.0,
                 "defaults": {"frame_codecs": ["jpeg", "raw"], "frame_quality": {"jpeg": 80},
                              "weight_codecs": ["q8delta+zstd", "f16+zstd"]},
                 "notes": ["a note"]},
        "target": {"key_frame_bytes_720p": 300_000, "miou_points": 1.0, "paper_key_frame_bytes": 3_030_000},
        "baseline": "raw / f32",
        "defaults": "jpeg@80 / q8delta+zstd (full: f16+zstd)",
        "settings": [setting("raw / f32", 2_765_000, 415_000, {"a": 0.0, "b": 0.0}),
                     setting("jpeg@80 / q8delta+zstd (full: f16+zstd)", default_frame, 60_000,
                             diffs or {"a": -0.4, "b": 0.3})],
    }


def test_the_report_leads_with_the_defaults_and_the_verdict(tmp_path: Path) -> None:
    text = render_markdown(results(200_000))
    assert "## Chosen defaults: jpeg@80 / q8delta+zstd (full: f16+zstd)" in text
    assert "**Target met**: 260.0 kB per key frame at 720p" in text and "8.6% of the paper's" in text
    assert "| **jpeg@80 / q8delta+zstd (full: f16+zstd)** | 200.0 | 3.0 | 60.0 | 260.0 | 8.6% |" in text
    assert "| a | 200.0 | 60.0 (61.0) | 260.0 | 38 | 7.50 | 60.00 | 59.60 | -0.40 |" in text
    assert "shadowtutor bench traffic --scenes a b" in text and "- a note" in text
    json_path, md_path = write_report(tmp_path / "docs" / "traffic_budget", results(200_000))
    assert json.loads(json_path.read_text())["defaults"].startswith("jpeg@80") and md_path.read_text() == text


def test_a_missed_target_says_by_how_much() -> None:
    assert "**Target missed** (20.0 kB over 300.0 kB)" in render_markdown(results(260_000))
    text = render_markdown(results(200_000, {"a": -2.0, "b": -0.6}))
    assert "**Target missed** (0.30 mIoU points beyond the 1-point margin)" in text
    assert "P-8 mIoU -1.30 points against uncompressed over the scenes (-2.00 on the worst one)" in text
