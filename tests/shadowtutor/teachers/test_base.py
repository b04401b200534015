from __future__ import annotations

import numpy as np
import pytest

from shadowtutor.teachers.base import (
    Teacher,
    TeacherBase,
    TeacherError,
    check_class_names,
    check_frame,
    check_threshold,
    label_dtype,
    resize_labels,
)


class ChannelTeacher(TeacherBase):
    """Labels each pixel with its brightest BGR channel (a real, trivially checkable teacher)."""

    name = "channel"
    class_names = ("blue", "green", "red")
    device = "cpu"

    def __init__(self) -> None:
        self.calls: list[int] = []

    def _label_batch(self, frames, frame_indices):
        self.calls.append(len(frames))
        return [f.argmax(axis=2).astype(np.uint8) for f in frames]


def test_label_goes_through_label_batch_and_checks_frames() -> None:
    teacher = ChannelTeacher()
    frame = np.zeros((4, 5, 3), np.uint8)
    frame[:, :, 2] = 9
    assert isinstance(teacher, Teacher)
    assert (teacher.label(frame) == 2).all()
    assert teacher.label_batch([]) == []
    assert len(teacher.label_batch([frame, frame], [0, 1])) == 2
    assert teacher.calls == [1, 2]
    with pytest.raises(TeacherError, match="2 frames but 1 frame indices"):
        teacher.label_batch([frame, frame], [0])
    assert teacher.describe() == {"backend": "channel", "device": "cpu", "class_names": ["blue", "green", "red"]}


@pytest.mark.parametrize(
    ("frame", "message"),
    [
        ([[0, 0, 0]], "NumPy array"),
        (np.zeros((4, 5), np.uint8), r"shape \(H, W, 3\)"),
        (np.zeros((4, 5, 4), np.uint8), r"shape \(H, W, 3\)"),
        (np.zeros((0, 5, 3), np.uint8), r"shape \(H, W, 3\)"),
        (np.zeros((4, 5, 3), np.float32), "uint8"),
    ],
)
def test_bad_frames_are_refused(frame, message) -> None:
    with pytest.raises(TeacherError, match=message):
        check_frame(frame)


def test_resize_labels_nearest_keeps_values_and_centres() -> None:
    labels = np.array([[0, 1], [2, 3]], np.uint8)
    up = resize_labels(labels, 4, 6)
    assert up.dtype == np.uint8
    assert (up[:2, :3] == 0).all() and (up[:2, 3:] == 1).all() and (up[2:, :3] == 2).all() and (up[2:, 3:] == 3).all()
    big = np.arange(64, dtype=np.int64).reshape(8, 8)
    # each output pixel samples the input pixel under its centre: rows/cols 1, 3, 5, 7
    assert (resize_labels(big, 4, 4) == big[1::2, 1::2]).all()
    assert resize_labels(labels, 2, 2) is labels


def test_small_helpers() -> None:
    assert label_dtype(256) is np.uint8 and label_dtype(257) is np.int64
    assert check_class_names(["a", "b"]) == ("a", "b")
    with pytest.raises(TeacherError, match="unique"):
        check_class_names(["a", "a"])
    with pytest.raises(TeacherError, match="non-empty"):
        check_class_names([])
    assert check_threshold("t", 0.25) == 0.25
    with pytest.raises(TeacherError, match=r"t must lie in \[0, 1\]"):
        check_threshold("t", 1.5)
