"""Teachers by name: ``build_teacher("maskrcnn", device="cuda")``.

Every backend takes the keyword ``device`` (``auto``, ``cpu``, ``cuda[:N]``); one that runs on the
host only (labels, mediapipe) accepts any and runs on the CPU.

Each backend's module is imported only when that backend is built, so importing the
package pulls in neither torch nor onnxruntime.
"""

from __future__ import annotations

import importlib
import inspect
from typing import Any

from shadowtutor.teachers.base import Teacher, TeacherError

# kind -> "module:class"
TEACHER_KINDS: dict[str, str] = {
    "maskrcnn": "shadowtutor.teachers.maskrcnn:MaskRCNNTeacher",
    "detectron2": "shadowtutor.teachers.detectron2:Detectron2Teacher",
    "onnx": "shadowtutor.teachers.onnx:OnnxTeacher",
    "labels": "shadowtutor.teachers.labels:LabelsTeacher",
    "mediapipe": "shadowtutor.teachers.mediapipe:MediaPipeTeacher",
}


def teacher_class(kind: str) -> type:
    if kind not in TEACHER_KINDS:
        raise TeacherError(f"unknown teacher {kind!r}: choose one of {', '.join(TEACHER_KINDS)}")
    module, _, attr = TEACHER_KINDS[kind].partition(":")
    return getattr(importlib.import_module(module), attr)


def build_teacher(kind: str, **options: Any) -> Teacher:
    """Build the ``kind`` teacher with its keyword ``options`` (see each backend's ``__init__``)."""
    cls = teacher_class(kind)
    try:
        inspect.signature(cls).bind(**options)
    except TypeError as exc:
        accepted = ", ".join(inspect.signature(cls).parameters)
        raise TeacherError(
            f"bad options for the {kind} teacher ({exc}); it takes: {accepted}"
        ) from None
    return cls(**options)
