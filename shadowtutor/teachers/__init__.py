"""Teachers: frame in, per-pixel class labels out.

``build_teacher(kind, **options)`` makes one of :data:`TEACHER_KINDS` (``maskrcnn``, ``detectron2``,
``onnx``, ``labels``, ``mediapipe``); every teacher has ``name``, ``class_names``, ``label``,
``label_batch`` and ``describe``; :func:`teach_batch` adds instance boxes where a teacher has them
(``maskrcnn``, ``detectron2``, ``labels`` of a scene). Backends import their heavy libraries only
when built.
"""

from shadowtutor.teachers.base import Teacher, TeacherBase, TeacherError, Teaching, teach_batch
from shadowtutor.teachers.registry import TEACHER_KINDS, build_teacher
from shadowtutor.teachers.writer import write_teacher_labels

__all__ = [
    "TEACHER_KINDS",
    "Teacher",
    "TeacherBase",
    "TeacherError",
    "Teaching",
    "build_teacher",
    "teach_batch",
    "write_teacher_labels",
]
