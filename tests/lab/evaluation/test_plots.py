from __future__ import annotations

from pathlib import Path

from shadowtutor_lab.evaluation.harness import WILD, SceneEvaluation, SettingTrace
from shadowtutor_lab.evaluation.plots import plot_scene


def test_plot_is_a_small_png(tmp_path: Path) -> None:
    trace = SettingTrace(miou=[0.2, 0.5, 0.8] * 20, strides=[8] * 30 + [16] * 30, key_frames=[0, 8, 16, 32])
    evaluation = SceneEvaluation("scene", 96, 64, {k: trace for k in (WILD, "p1", "p8", "f1")})
    path = plot_scene(evaluation, tmp_path / "plots" / "scene.png", cuts=[30])
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert path.stat().st_size < 150_000
