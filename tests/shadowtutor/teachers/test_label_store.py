from __future__ import annotations

import json
from pathlib import Path

import cv2
import numpy as np
import pytest

from shadowtutor.teachers.base import TeacherError
from shadowtutor.teachers.label_store import (
    label_path,
    locate_labels,
    read_label,
    write_label,
    write_label_metadata,
)


def test_png_round_trip_8_and_16_bit(tmp_path: Path) -> None:
    small = np.arange(12, dtype=np.int64).reshape(3, 4)
    path = write_label(tmp_path, 7, small)
    assert path.name == "000007.png"
    assert cv2.imread(str(path), cv2.IMREAD_UNCHANGED).dtype == np.uint8
    assert (read_label(path) == small).all()
    big = small * 100
    back = read_label(write_label(tmp_path, 8, big))
    assert back.dtype == np.uint16 and (back == big).all()
    with pytest.raises(TeacherError, match=r"\[0, 65535\]"):
        write_label(tmp_path, 9, small - 1)
    with pytest.raises(TeacherError, match="start at 0"):
        label_path(tmp_path, -1)


def test_unreadable_or_colour_files_are_refused(tmp_path: Path) -> None:
    cv2.imwrite(str(tmp_path / "000000.png"), np.zeros((3, 4, 3), np.uint8))
    with pytest.raises(TeacherError, match="not a single-channel"):
        read_label(tmp_path / "000000.png")
    (tmp_path / "000001.png").write_bytes(b"junk")
    with pytest.raises(TeacherError, match="cannot read"):
        read_label(tmp_path / "000001.png")


def test_locate_labels_in_both_layouts(tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    assert locate_labels(plain) == (plain, None)
    write_label_metadata(plain, ("a", "background"), teacher={"backend": "x"})
    assert locate_labels(plain) == (plain, ("a", "background"))
    scene = tmp_path / "scene"
    (scene / "labels").mkdir(parents=True)
    (scene / "scene.json").write_text(json.dumps({"class_names": ["person", "background"], "fps": 30}))
    assert locate_labels(scene) == (scene / "labels", ("person", "background"))
    (scene / "scene.json").write_text("{")
    with pytest.raises(TeacherError, match="cannot read class names"):
        locate_labels(scene)
    with pytest.raises(TeacherError, match="not found"):
        locate_labels(tmp_path / "absent")
