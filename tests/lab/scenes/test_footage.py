"""Footage as labelled scenes, cached by content hash (the real MediaPipe teacher on tiny generated clips)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import cv2
import numpy as np
import pytest

from edge_agent.sources import SourceError
from shadowtutor.scene_store import Scene, SceneError
from shadowtutor.teachers import TeacherError
from shadowtutor_lab.scenes.footage import footage_scene, scaled_to_width
from shadowtutor_lab.scenes.generator import make_scene
from tests.support.videos import DAMAGED_FRAMES, damaged_video


@pytest.fixture(scope="module")
def clip(tmp_path_factory: pytest.TempPathFactory) -> Path:
    scene = make_scene("fixed-people", 12, 5, tmp_path_factory.mktemp("clip") / "scene", size=(128, 72),
                       progress=False)
    path = tmp_path_factory.mktemp("footage") / "my clip.mp4"
    shutil.copy(scene / "video.mp4", path)
    return path


def test_footage_becomes_a_labelled_scene_and_is_cached_by_content(
        clip: Path, tmp_path: Path, mediapipe_model: Path) -> None:
    first = footage_scene(str(clip), frames=8, teacher="mediapipe", cache_dir=tmp_path, progress=False)
    scene = Scene.open(first.directory)
    assert not first.cached and len(scene) == 8 and scene.meta.size == (128, 72)
    assert first.native_size == (128, 72)
    assert json.loads((first.directory / "source.json").read_text())["content_sha256"] == first.content_sha256
    # the same pixels under another name: labelled once
    renamed = tmp_path / "renamed.mp4"
    shutil.copy(clip, renamed)
    again = footage_scene(str(renamed), frames=8, teacher="mediapipe", cache_dir=tmp_path, progress=False)
    assert again.cached and again.directory == first.directory
    # other frames, or another size: other content
    fewer = footage_scene(str(clip), frames=6, teacher="mediapipe", cache_dir=tmp_path, progress=False)
    smaller = footage_scene(str(clip), frames=8, max_width=64, teacher="mediapipe", cache_dir=tmp_path,
                            progress=False)
    assert len({first.directory, fewer.directory, smaller.directory}) == 3
    assert Scene.open(smaller.directory).meta.size == (64, 36)
    # reuse=False labels again into the same place
    redone = footage_scene(str(clip), frames=8, teacher="mediapipe", cache_dir=tmp_path, progress=False, reuse=False)
    assert not redone.cached and redone.directory == first.directory


def test_scaled_to_width_keeps_the_aspect_with_an_even_height() -> None:
    assert scaled_to_width((1280, 720), 320) == (320, 180)
    assert scaled_to_width((768, 576), 320) == (320, 240)
    assert scaled_to_width((200, 100), 320) == (200, 100)
    assert scaled_to_width((1000, 333), None) == (1000, 333)


def test_not_a_video_is_a_source_error(tmp_path: Path, mediapipe_model: Path) -> None:
    text = tmp_path / "notes.mp4"
    text.write_text("this is not a video\n")
    with pytest.raises(SourceError, match="notes.mp4"):
        footage_scene(str(text), cache_dir=tmp_path, progress=False)
    with pytest.raises(SourceError, match="not found"):
        footage_scene(str(tmp_path / "absent.mp4"), cache_dir=tmp_path, progress=False)


def test_a_video_without_frames_is_refused(tmp_path: Path, mediapipe_model: Path) -> None:
    empty = tmp_path / "empty.avi"
    writer = cv2.VideoWriter(str(empty), cv2.VideoWriter_fourcc(*"MJPG"), 10, (64, 48))
    writer.release()
    with pytest.raises((SourceError, SceneError)):
        footage_scene(str(empty), cache_dir=tmp_path, progress=False)


def test_a_live_source_needs_a_frame_count(tmp_path: Path, mediapipe_model: Path, monkeypatch) -> None:
    # the count is checked before anything is read
    import edge_agent.sources as sources

    class Opened:
        def isOpened(self) -> bool:  # noqa: N802 - OpenCV's name
            return True

        def read(self) -> tuple[bool, np.ndarray]:
            return True, np.zeros((48, 64, 3), np.uint8)

        def get(self, _: int) -> float:
            return 25.0

        def release(self) -> None:
            pass

    class FakeStream(sources.VideoSource):
        def __init__(self, text: str, **options) -> None:
            super().__init__(text, **options, capture_factory=lambda spec: Opened())

    # a mock capture only: no RTSP server runs in the tests
    monkeypatch.setattr(sources, "VideoSource", FakeStream)
    with pytest.raises(SceneError, match="live stream source"):
        footage_scene("rtsp://camera.invalid/stream", cache_dir=tmp_path, progress=False)
    footage = footage_scene("rtsp://camera.invalid/stream", frames=4, cache_dir=tmp_path, progress=False)
    assert len(Scene.open(footage.directory)) == 4


def test_an_unknown_teacher_is_refused_before_reading(tmp_path: Path) -> None:
    with pytest.raises(TeacherError, match="unknown teacher"):
        footage_scene("whatever.mp4", teacher="oracle", cache_dir=tmp_path, progress=False)


def test_a_damaged_video_is_refused_unless_short_clips_are_accepted(tmp_path: Path, mediapipe_model: Path) -> None:
    """What `evaluate --frames 30` and `scenes make-real` read: a file damaged midway fails, or with
    accept_short gives the frames read before the damage."""
    path = damaged_video(tmp_path / "damaged.mp4")
    with pytest.raises(SceneError, match="could not be read past frame .* pass --accept-short"):
        footage_scene(str(path), frames=DAMAGED_FRAMES, teacher="mediapipe", cache_dir=tmp_path, progress=False)
    footage = footage_scene(str(path), frames=DAMAGED_FRAMES, teacher="mediapipe", cache_dir=tmp_path,
                            progress=False, accept_short=True)
    assert 0 < len(Scene.open(footage.directory)) < DAMAGED_FRAMES
