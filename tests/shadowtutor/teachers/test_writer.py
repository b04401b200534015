from __future__ import annotations

import json
from pathlib import Path

import cv2
import numpy as np
import pytest

from shadowtutor.teachers import TeacherBase, TeacherError, build_teacher, write_teacher_labels


class BrightTeacher(TeacherBase):
    """Class 1 ("person") where a pixel is bright, else background: a small real teacher whose
    output depends on the decoded frame, so the test can recompute it."""

    name = "bright"
    class_names = ("background", "person")
    device = "cpu"

    def __init__(self) -> None:
        self.batches: list[list[int]] = []

    def _label_batch(self, frames, frame_indices):
        self.batches.append(frame_indices)
        return [(f.mean(axis=2) > 127).astype(np.uint8) for f in frames]


def make_video(path: Path, count: int = 7) -> list[np.ndarray]:
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"mp4v"), 10, (32, 24))
    for i in range(count):
        frame = np.zeros((24, 32, 3), np.uint8)
        frame[:, : 4 * (i + 1)] = 255
        writer.write(frame)
    writer.release()
    capture = cv2.VideoCapture(str(path))
    decoded = []
    while True:
        ok, frame = capture.read()
        if not ok:
            break
        decoded.append(frame)
    capture.release()
    assert len(decoded) == count
    return decoded


def test_labels_written_in_batches_and_read_back(tmp_path: Path) -> None:
    frames = make_video(tmp_path / "v.mp4")
    teacher = BrightTeacher()
    written = write_teacher_labels(teacher, tmp_path / "v.mp4", tmp_path / "out", batch_size=3, progress=False)
    assert written == 7 and teacher.batches == [[0, 1, 2], [3, 4, 5], [6]]
    meta = json.loads((tmp_path / "out" / "labels.json").read_text())
    assert meta["class_names"] == ["background", "person"] and meta["frames"] == 7
    assert meta["teacher"]["backend"] == "bright"
    stored = build_teacher("labels", labels_dir=tmp_path / "out")
    for i, frame in enumerate(frames):
        expected = teacher.label(frame)
        assert (stored.label(frame, frame_index=i) == expected).all()
        assert 0 < expected.sum() < expected.size


def test_remap_to_other_class_list_and_max_frames(tmp_path: Path) -> None:
    frames = make_video(tmp_path / "v.mp4")
    out = tmp_path / "out"
    written = write_teacher_labels(BrightTeacher(), tmp_path / "v.mp4", out, class_names=["person", "background"],
                                   max_frames=2, progress=False)
    assert written == 2 and sorted(p.name for p in out.glob("*.png")) == ["000000.png", "000001.png"]
    stored = build_teacher("labels", labels_dir=out)
    labels = stored.label(frames[1], frame_index=1)
    assert ((labels == 0) == (frames[1].mean(axis=2) > 127)).all() and set(np.unique(labels)) == {0, 1}


def test_bad_inputs(tmp_path: Path) -> None:
    make_video(tmp_path / "v.mp4", count=1)
    with pytest.raises(TeacherError, match=r"\['dog'\] match no bright class"):
        write_teacher_labels(BrightTeacher(), tmp_path / "v.mp4", tmp_path / "out", class_names=["dog", "background"])
    with pytest.raises(TeacherError, match="cannot open video"):
        write_teacher_labels(BrightTeacher(), tmp_path / "absent.mp4", tmp_path / "out", progress=False)
    with pytest.raises(TeacherError, match="batch_size"):
        write_teacher_labels(BrightTeacher(), tmp_path / "absent.mp4", tmp_path / "out", batch_size=0)
