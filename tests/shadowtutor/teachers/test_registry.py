from __future__ import annotations

import subprocess
import sys

import pytest

from shadowtutor.teachers import TEACHER_KINDS, TeacherError, build_teacher
from shadowtutor.teachers.labels import LabelsTeacher


def test_registry_builds_by_name_and_checks_options(tmp_path) -> None:
    assert set(TEACHER_KINDS) == {"maskrcnn", "detectron2", "onnx", "labels", "mediapipe"}
    teacher = build_teacher("labels", labels_dir=tmp_path, class_names=["person", "background"])
    assert isinstance(teacher, LabelsTeacher)
    with pytest.raises(TeacherError, match="unknown teacher 'yolo'.*maskrcnn"):
        build_teacher("yolo")
    with pytest.raises(TeacherError, match="bad options for the labels teacher.*labels_dir, class_names"):
        build_teacher("labels", labels_dir=tmp_path, weights_path="x")
    with pytest.raises(TeacherError, match="bad options for the onnx teacher"):
        build_teacher("onnx")  # model_path missing


def test_importing_the_package_stays_cheap() -> None:
    code = "import sys, shadowtutor.teachers; print(sorted({'torch', 'cv2', 'onnxruntime'} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
