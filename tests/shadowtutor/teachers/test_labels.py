from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from shadowtutor.classes import LVS_CLASSES
from shadowtutor.teachers import TeacherError, build_teacher
from shadowtutor.teachers.label_store import write_label, write_label_metadata

FRAME = np.zeros((6, 8, 3), np.uint8)


def make_scene(root: Path) -> list[np.ndarray]:
    """A scene directory as the scene generator writes it: labels/NNNNNN.png and scene.json."""
    (root / "labels").mkdir(parents=True)
    (root / "scene.json").write_text(json.dumps({"class_names": list(LVS_CLASSES)}))
    rng = np.random.default_rng(0)
    labels = [rng.integers(0, len(LVS_CLASSES), (6, 8)).astype(np.uint8) for _ in range(3)]
    for i, lab in enumerate(labels):
        write_label(root / "labels", i, lab)
    return labels


def test_scene_ground_truth_by_frame_index(tmp_path: Path) -> None:
    stored = make_scene(tmp_path)
    teacher = build_teacher("labels", labels_dir=str(tmp_path))
    assert teacher.class_names == LVS_CLASSES
    assert (teacher.label(FRAME, frame_index=2) == stored[2]).all()
    batch = teacher.label_batch([FRAME, FRAME], [1, 0])
    assert (batch[0] == stored[1]).all() and (batch[1] == stored[0]).all()
    assert teacher.describe()["labels_dir"] == str(tmp_path / "labels")


def test_resized_to_the_frame_with_nearest_neighbour(tmp_path: Path) -> None:
    stored = make_scene(tmp_path)
    teacher = build_teacher("labels", labels_dir=tmp_path)
    big = teacher.label(np.zeros((12, 16, 3), np.uint8), frame_index=0)
    assert big.shape == (12, 16) and (big[::2, ::2] == stored[0]).all() and (big[1::2, 1::2] == stored[0]).all()


def test_clear_errors(tmp_path: Path) -> None:
    make_scene(tmp_path)
    teacher = build_teacher("labels", labels_dir=tmp_path)
    with pytest.raises(TeacherError, match="pass frame_index"):
        teacher.label(FRAME)
    with pytest.raises(TeacherError, match="no stored label for frame 3"):
        teacher.label(FRAME, frame_index=3)
    with pytest.raises(TeacherError, match="no stored label for frame 1000"):  # a file name too long (fuzzing)
        teacher.label(FRAME, frame_index=10**300)
    few = build_teacher("labels", labels_dir=tmp_path, class_names=["person", "background"])
    with pytest.raises(TeacherError, match="holds class .* but there are 2 classes"):
        few.label(FRAME, frame_index=0)
    bare = tmp_path / "bare"
    bare.mkdir()
    with pytest.raises(TeacherError, match="no class names"):
        build_teacher("labels", labels_dir=bare)
    write_label_metadata(bare, ("person", "background"))
    assert build_teacher("labels", labels_dir=bare).class_names == ("person", "background")


def test_a_generated_scene_gives_its_instance_boxes(tmp_path: Path) -> None:
    from shadowtutor.scene_store import INSTANCES_NAME, Scene
    from shadowtutor_lab.scenes.generator import make_scene

    scene_dir = make_scene("fixed-street", 3, seed=5, out=tmp_path / "scene", size=(64, 36), progress=False)
    teacher = build_teacher("labels", labels_dir=scene_dir)
    (taught,) = teacher.teach_batch([np.zeros((72, 128, 3), np.uint8)], [2])  # twice the scene's size
    np.testing.assert_array_equal(taught.boxes, Scene.open(scene_dir).boxes(2) * 2)
    assert taught.labels.shape == (72, 128) and teacher.describe()["instances"]
    (scene_dir / INSTANCES_NAME).unlink()  # a scene made before instances.json: labels only
    (bare,) = build_teacher("labels", labels_dir=scene_dir).teach_batch([np.zeros((36, 64, 3), np.uint8)], [0])
    assert bare.boxes is None


def test_handmade_labels_have_no_boxes(tmp_path: Path) -> None:
    stored = make_scene(tmp_path)
    (taught,) = build_teacher("labels", labels_dir=tmp_path).teach_batch([FRAME], [1])
    assert (taught.labels == stored[1]).all() and taught.boxes is None
