"""Re-sampling scenes to a lower frame rate (the paper's Table 7), generated and real."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import cv2
import numpy as np
import pytest

from shadowtutor.scene_store import META_NAME, Scene, SceneError
from shadowtutor_cli import main as cli_main
from shadowtutor_lab.evaluation.accuracy import scene_command
from shadowtutor_lab.scenes.generator import SceneRenderer, make_scene
from shadowtutor_lab.scenes.real import make_real_command, real_scene, scaled_size
from shadowtutor_lab.scenes.resample import sample_indices, sampled_cuts


def test_the_nearest_source_frame_to_each_instant_is_kept() -> None:
    assert sample_indices(30, 30, 7) == [0, 4, 9, 13, 17, 21, 26]  # 0, 4.29, 8.57, 12.86, ...
    assert sample_indices(300, 30, 7)[-1] == 296 and len(sample_indices(300, 30, 7)) == 70
    assert sample_indices(10, 10, 10) == list(range(10))  # the same rate keeps every frame
    assert sample_indices(795, 10, 7)[:5] == [0, 1, 3, 4, 6]
    assert sample_indices(1, 30, 7) == [0]


@pytest.mark.parametrize(("fps", "message"), [(31, r"must lie in \(0, 30\]"), (0, "must lie in"),
                                             (float("nan"), "must lie in")])
def test_a_rate_above_the_source_or_not_positive_is_refused(fps: float, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        sample_indices(30, 30, fps)


def test_cuts_move_to_the_first_kept_frame_of_each_new_shot() -> None:
    kept = sample_indices(600, 30, 7)  # 240 and 480 are instants 56/7 s and 112/7 s, so both are kept
    assert sampled_cuts([240, 480], kept) == (kept.index(240), kept.index(480))
    assert sampled_cuts([10], [0, 4, 9, 13]) == (3,)  # the shot starts at 10: its first kept frame is 13
    assert sampled_cuts([5, 6], [0, 4, 9]) == (2,)  # a shot no kept frame shows leaves no cut of its own
    assert sampled_cuts([20], [0, 4, 9]) == ()  # after the last kept frame


def test_a_resampled_generated_scene_is_the_full_rate_scenes_frames_at_the_kept_instants(tmp_path: Path) -> None:
    frames, fps = 130, 30
    scene = Scene.open(make_scene("moving-street", frames, 5, tmp_path / "s7", size=(96, 64), fps=fps,
                                  progress=False, sample_fps=7))
    kept = sample_indices(frames, fps, 7)
    rendered = list(SceneRenderer("moving-street", frames, 5, (96, 64), fps))
    assert (scene.meta.frames, scene.meta.fps, scene.meta.source_frames, scene.meta.source_fps) == (len(kept), 7,
                                                                                                  frames, fps)
    assert scene.meta.cuts == sampled_cuts(SceneRenderer("moving-street", frames, 5, (96, 64), fps).cuts, kept)
    for index, (source, frame) in enumerate(zip(kept, scene.frames(), strict=True)):
        np.testing.assert_array_equal(scene.label(index), rendered[source].label)
        np.testing.assert_array_equal(scene.boxes(index), rendered[source].instances[:, 1:].astype(np.float32))
        assert cv2.PSNR(rendered[source].image, frame) > 25
    meta = json.loads((scene.directory / META_NAME).read_text())
    assert (meta["source_frames"], meta["source_fps"], meta["fps"]) == (130, 30, 7)


def test_the_benchmarks_scene_command_makes_the_resampled_scene_again(tmp_path: Path) -> None:
    first = Scene.open(make_scene("fixed-people", 40, 2, tmp_path / "a", size=(64, 48), progress=False,
                                  sample_fps=7))
    command = shlex.split(scene_command(first))
    assert command[:3] == ["shadowtutor", "scenes", "make"] and "--sample-fps" in command
    command[command.index("--out") + 1] = str(tmp_path / "b")
    assert cli_main([*command[1:], "--no-progress"]) == 0
    again = Scene.open(tmp_path / "b")
    assert again.meta == first.meta
    for index in range(len(first)):
        np.testing.assert_array_equal(again.label(index), first.label(index))


def test_a_full_rate_scene_json_has_no_source_fields(small_scene: Path) -> None:
    meta = json.loads((small_scene / META_NAME).read_text())
    assert "source_fps" not in meta and not Scene.open(small_scene).meta.resampled


def test_half_a_source_or_an_impossible_source_is_refused(small_scene: Path, tmp_path: Path) -> None:
    meta = json.loads((small_scene / META_NAME).read_text())
    for broken, message in [({"source_fps": 30}, "wrong type"),
                            ({"source_frames": 2, "source_fps": 30}, "needs a source with as many frames")]:
        copy = tmp_path / f"copy{len(message)}"
        copy.mkdir()
        (copy / META_NAME).write_text(json.dumps(meta | broken))
        with pytest.raises(SceneError, match=message):
            Scene.open(copy)


def test_a_real_clip_resampled_is_labelled_by_the_teacher_at_the_kept_frames(
    mediapipe_model: Path, real_clips: dict[str, Path], tmp_path: Path
) -> None:
    size = scaled_size("bikes", 160)
    full = Scene.open(real_scene("bikes", 40, size, cache_dir=tmp_path, progress=False))
    sampled = Scene.open(real_scene("bikes", 40, size, cache_dir=tmp_path, progress=False, sample_fps=7))
    kept = sample_indices(40, 25, 7)
    assert sampled.directory != full.directory
    assert (sampled.meta.frames, sampled.meta.fps, sampled.meta.source_frames, sampled.meta.source_fps) == (
        len(kept), 7, 40, 25)
    assert sampled.meta.cuts == sampled_cuts(full.meta.cuts, kept) == (kept.index(32),)  # bikes cuts at 30
    full_frames = list(full.frames())
    for index, frame in enumerate(sampled.frames()):  # each made from the clip's own frame, encoded once
        assert cv2.PSNR(full_frames[kept[index]], frame) > 30
    # The same teacher on those frames; at this tiny size the encoder's noise can flip a frame's few people.
    agree = [np.mean(sampled.label(i) == full.label(source)) for i, source in enumerate(kept)]
    assert np.mean(agree) > 0.95
    assert make_real_command(sampled).endswith("--frames 40 --sample-fps 7 --width 160 --teacher mediapipe")
    with pytest.raises(ValueError, match=r"must lie in \(0, 25\]"):
        real_scene("bikes", 40, size, cache_dir=tmp_path, progress=False, sample_fps=30)
