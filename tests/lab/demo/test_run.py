"""``shadowtutor demo`` end to end, short: real server and agent processes on loopback, on a real clip
with the real teacher (the default) and on a generated scene with its ground truth."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from shadowtutor_cli import main

pytestmark = pytest.mark.slow


def test_the_demo_runs_a_real_clip_with_the_real_teacher(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], mediapipe_model: Path, real_clips: dict[str, Path]
) -> None:
    out = tmp_path / "demo"
    code = main(["demo", "--out", str(out), "--clip", "bikes", "--frames", "24", "--width", "160",
                 "--cache-dir", str(tmp_path / "cache")])
    assert code == 0
    printed = capsys.readouterr().out
    assert "| frames labelled | 24/24 | 24/24 |" in printed and "Teacher: `mediapipe`" in printed
    data = json.loads((out / "report.json").read_text())
    shadow, naive = data["shadowtutor"], data["naive"]
    assert naive["key_frame_ratio"] == 1.0 and shadow["key_frame_ratio"] < 0.5
    # the real teacher costs the server real time for every naive frame, and distillation for ShadowTutor
    assert naive["teacher_seconds"] > 0 and shadow["distill_seconds"] > 0
    assert naive["server_ms_per_frame"] > 0 and shadow["server_ms_per_frame"] > 0
    assert data["prediction_paper_gpu_server"]["shadowtutor_fps_max"] > 0
    assert len(list((out / "naive" / "labels").glob("*.png"))) == 24


def test_the_demo_runs_a_generated_scene_with_its_ground_truth(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "demo"
    code = main(["demo", "--generated", "--out", str(out), "--frames", "24", "--size", "128x72",
                 "--cache-dir", str(tmp_path / "cache")])
    assert code == 0
    printed = capsys.readouterr().out
    assert "| frames labelled | 24/24 | 24/24 |" in printed
    data = json.loads((out / "report.json").read_text())
    shadow, naive = data["shadowtutor"], data["naive"]
    assert shadow["mode"] == "distill" and naive["mode"] == "naive"
    assert shadow["updates_applied"] >= 2  # key frames at 0, 8, 16 at least; each update applied
    assert naive["key_frame_ratio"] == 1.0 and shadow["key_frame_ratio"] < 0.5
    assert shadow["handshake_bytes"] > 100_000  # the WELCOME carries the whole student
    assert naive["miou_percent"] == pytest.approx(100.0)  # naive shows the teacher's own labels
    assert (out / "shadowtutor" / "overlay.mp4").stat().st_size > 0
