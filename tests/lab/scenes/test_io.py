"""Reading scenes: the format, resizing, and clear errors for broken scene directories."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import cv2
import numpy as np
import pytest

from shadowtutor.classes import LVS_CLASSES
from shadowtutor.scene_store import META_NAME, VIDEO_NAME, Scene, SceneError, SceneMeta, label_path, scene_written_into


@pytest.fixture
def scene_copy(small_scene: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(small_scene, tmp_path / "copy"))


def test_files_follow_the_documented_layout(small_scene: Path) -> None:
    meta = json.loads((small_scene / META_NAME).read_text())
    assert list(meta) == ["format", "preset", "seed", "frames", "width", "height", "fps", "class_names",
                          "camera", "category", "cuts", "description"]
    assert meta["format"] == "shadowtutor-scene/1" and meta["class_names"] == list(LVS_CLASSES)
    assert meta["fps"] == 10 and isinstance(meta["fps"], int)
    assert sorted(p.name for p in (small_scene / "labels").iterdir()) == [
        f"{i:06d}.png" for i in range(meta["frames"])]
    label = cv2.imread(str(small_scene / "labels" / "000000.png"), cv2.IMREAD_UNCHANGED)
    assert label.dtype == np.uint8 and label.shape == (meta["height"], meta["width"])
    assert (small_scene / VIDEO_NAME).read_bytes()[4:8] == b"ftyp"  # an MP4 container


def test_meta_round_trips_through_json(small_scene: Path) -> None:
    meta = SceneMeta.read(small_scene)
    assert SceneMeta.from_dict(json.loads(meta.to_json())) == meta
    assert meta.size == (160, 90) and meta.camera == "fixed" and meta.category == "street"


def test_resized_reading(small_scene: Path) -> None:
    scene = Scene.open(small_scene)
    frames = list(scene.frames(size=(80, 44)))
    assert len(frames) == len(scene) and frames[0].shape == (44, 80, 3) and frames[0].dtype == np.uint8
    full, half = scene.label(5), scene.label(5, size=(80, 44))
    assert half.shape == (44, 80) and set(np.unique(half)) <= set(np.unique(full))
    np.testing.assert_array_equal(half, cv2.resize(full, (80, 44), interpolation=cv2.INTER_NEAREST))
    with pytest.raises(ValueError, match="size must be"):
        scene.label(0, size=(0, 10))
    with pytest.raises(IndexError):
        scene.label(len(scene))


def test_missing_or_corrupt_directories(tmp_path: Path, scene_copy: Path) -> None:
    with pytest.raises(SceneError, match="not found"):
        Scene.open(tmp_path / "nowhere")
    with pytest.raises(SceneError, match="scene.json is missing"):
        Scene.open(tmp_path)
    (scene_copy / META_NAME).write_text("{not json")
    with pytest.raises(SceneError, match="cannot read"):
        Scene.open(scene_copy)


def test_incomplete_or_ill_typed_metadata(scene_copy: Path) -> None:
    meta = json.loads((scene_copy / META_NAME).read_text())
    for broken, message in [
        ({k: v for k, v in meta.items() if k != "cuts"}, r"lacks \['cuts'\]"),
        (meta | {"frames": "many"}, "wrong type"),
        (meta | {"format": "shadowtutor-scene/9"}, "unknown scene format"),
        (meta | {"camera": "drone"}, "camera must be one of"),
        (meta | {"cuts": [0]}, "cuts"),
        (meta | {"cut_interval": -3}, "cut_interval must be >= 0"),
        (meta | {"cut_interval": "often"}, "wrong type"),
    ]:
        (scene_copy / META_NAME).write_text(json.dumps(broken))
        with pytest.raises(SceneError, match=message):
            Scene.open(scene_copy)


def test_label_count_and_video_frame_count_must_match_the_metadata(scene_copy: Path) -> None:
    last = label_path(scene_copy, 11)
    data = last.read_bytes()
    last.unlink()
    with pytest.raises(SceneError, match="12 frames but labels/ holds 11"):
        Scene.open(scene_copy)
    last.write_bytes(data)
    shutil.copy(last, label_path(scene_copy, 12))
    meta = json.loads((scene_copy / META_NAME).read_text())
    (scene_copy / META_NAME).write_text(json.dumps(meta | {"frames": 13}))
    with pytest.raises(SceneError, match="video.mp4 has 12 frames, scene.json says 13"):
        Scene.open(scene_copy)


def test_a_label_of_the_wrong_size_or_values(scene_copy: Path) -> None:
    scene = Scene.open(scene_copy)
    cv2.imwrite(str(label_path(scene_copy, 2)), np.zeros((90, 161), np.uint8))
    with pytest.raises(SceneError, match=r"\(90, 161\), expected uint8 \(90, 160\)"):
        scene.label(2)
    cv2.imwrite(str(label_path(scene_copy, 3)), np.full((90, 160), 9, np.uint8))
    with pytest.raises(SceneError, match="holds class 9"):
        scene.label(3)
    label_path(scene_copy, 4).write_bytes(b"not a png")
    with pytest.raises(SceneError, match="cannot read label"):
        scene.label(4)


def test_a_truncated_video_is_reported_while_reading(scene_copy: Path) -> None:
    scene = Scene.open(scene_copy)
    writer = cv2.VideoWriter(str(scene_copy / VIDEO_NAME), cv2.VideoWriter_fourcc(*"mp4v"), 10, (160, 90))
    for _ in range(5):
        writer.write(np.zeros((90, 160, 3), np.uint8))
    writer.release()
    with pytest.raises(SceneError, match="ended after 5 frames"):
        list(scene.frames())


def test_a_scene_written_beside_replaces_the_old_one_only_when_complete(small_scene: Path, tmp_path: Path) -> None:
    target = tmp_path / "scenes" / "street"
    with scene_written_into(target) as tmp:
        shutil.copytree(small_scene, tmp, dirs_exist_ok=True)
    assert Scene.open(target).meta == Scene.open(small_scene).meta
    before = sorted(p.name for p in target.iterdir())
    with pytest.raises(SceneError), scene_written_into(target) as tmp:  # no meta: not a scene, not moved in
        (tmp / VIDEO_NAME).write_bytes(b"")
    with pytest.raises(KeyboardInterrupt), scene_written_into(target):  # interrupted while writing
        raise KeyboardInterrupt
    assert sorted(p.name for p in target.iterdir()) == before
    assert [p.name for p in target.parent.iterdir()] == ["street"]  # no partial folder left behind
