from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from edge_agent.sources import SourceError
from shadowtutor.algorithms.params import AlgorithmParams
from shadowtutor.classes import LVS_CLASSES
from shadowtutor.models.checkpoint import save_student
from shadowtutor.models.student import StudentNet
from shadowtutor.scene_store import SceneError
from shadowtutor_lab.evaluation.accuracy import AccuracyConfig, run_accuracy

REQUIRED = ("wild_miou", "p1_miou", "p8_miou", "f1_miou", "key_frame_ratio", "mean_distill_steps_partial",
            "mean_distill_steps_full", "distill_step_ms_partial", "distill_step_ms_full", "bytes_per_key_frame")


def test_run_writes_the_report_and_resumes(tiny_scene: Path, tmp_path: Path) -> None:
    torch.manual_seed(0)
    # a student that claims to be pre-trained on the evaluated scene: the report must warn
    student = save_student(tmp_path / "s.pt", StudentNet(9), LVS_CLASSES,
                           {"pretrain": {"scenes": [{"preset": "fixed-people", "seed": 3}]}})
    config = AccuracyConfig(scenes=(tiny_scene,), out_dir=tmp_path / "out", frames=16, student=student,
                            backend="torch", params=AlgorithmParams(max_updates=1), progress=False,
                            command="shadowtutor bench accuracy ...")
    results = run_accuracy(config)
    name = tiny_scene.name
    assert list(results) == [name]
    entry = results[name]
    assert all(entry[k] is not None for k in REQUIRED)
    assert entry["frames"] == 16 and (entry["preset"], entry["seed"]) == ("fixed-people", 3)
    assert entry["bytes_per_key_frame"] == 96 * 64 * 3 + 103_465 * 4
    out = config.out_dir
    assert json.loads((out / "results.json").read_text()) == json.loads(json.dumps(results))
    meta = json.loads((out / "meta.json").read_text())
    assert meta["machine"]["cpu_model"] and meta["student"]["sha256"] and meta["backend"] == "torch"
    assert any("pre-train" in note for note in meta["notes"])
    assert meta["scene_commands"] == [f"shadowtutor scenes make --preset fixed-people --frames 40 --seed 3 "
                                      f"--out {tiny_scene} --size 96x64 --fps 30"]
    assert (out / meta["plots"][name]).is_file()
    assert "shadowtutor bench accuracy ..." in (out / "results.md").read_text()

    trace = out / "traces" / f"{name}.json"
    stamp = trace.stat().st_mtime_ns
    assert run_accuracy(config) == results  # reused, not recomputed
    assert trace.stat().st_mtime_ns == stamp
    assert json.loads((out / "meta.json").read_text())["reused_scenes"] == [name]
    shorter = run_accuracy(AccuracyConfig(**{**config.__dict__, "frames": 12}))
    assert shorter[name]["frames"] == 12 and trace.stat().st_mtime_ns != stamp
    assert json.loads((out / "meta.json").read_text())["distill_precision"] == "fp32"
    stamp = trace.stat().st_mtime_ns
    run_accuracy(AccuracyConfig(**{**config.__dict__, "frames": 12, "precision": "bf16"}))  # not the fp32 traces
    assert trace.stat().st_mtime_ns != stamp
    assert json.loads((out / "meta.json").read_text())["distill_precision"] == "bf16"
    assert "training precision `bf16`" in (out / "results.md").read_text()


def test_a_video_file_is_labelled_by_the_real_teacher_and_evaluated(
        tiny_scene: Path, tmp_path: Path, mediapipe_model: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SHADOWTUTOR_CACHE_DIR", str(tmp_path / "cache"))
    video = tmp_path / "my camera.mp4"
    shutil.copy(tiny_scene / "video.mp4", video)
    config = AccuracyConfig(scenes=(video,), out_dir=tmp_path / "out", frames=9, backend="torch",
                            params=AlgorithmParams(max_updates=1, threshold_policy="auto"), progress=False)
    results = run_accuracy(config)
    assert list(results) == ["my camera"] and results["my camera"]["frames"] == 9
    assert results["my camera"]["preset"] == "footage:my camera.mp4"
    meta = json.loads((config.out_dir / "meta.json").read_text())
    assert meta["scene_commands"] == [f"shadowtutor scenes make-real --clip '{video}' --frames 9 --width 96 "
                                      "--teacher mediapipe"]
    assert meta["params"]["threshold_policy"] == "auto"
    assert any("real teacher" in note for note in meta["notes"])


@pytest.mark.parametrize("name", ["missing.mp4", "a-folder-that-is-not-there"])
def test_a_path_that_is_no_scene_clip_or_video_is_one_clear_error(tmp_path: Path, name: str) -> None:
    config = AccuracyConfig(scenes=(tmp_path / name,), out_dir=tmp_path / "out", progress=False)
    message = r"neither a scene directory, a packaged clip \(vtest, bikes, carphone\) nor a video file"
    with pytest.raises(SceneError, match=message):
        run_accuracy(config)


def test_a_file_that_is_not_a_video_is_one_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SHADOWTUTOR_CACHE_DIR", str(tmp_path / "cache"))
    text = tmp_path / "notes.mp4"
    text.write_text("not a video\n")
    with pytest.raises(SourceError, match="cannot open"):
        run_accuracy(AccuracyConfig(scenes=(text,), out_dir=tmp_path / "out", progress=False))
