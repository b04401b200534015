"""Teachers: frame in, per-pixel class labels out (issue 2, point 3).

``build_teacher(kind, **options)`` makes one of :data:`TEACHER_KINDS` (``maskrcnn``,
``detectron2``, ``onnx``, ``labels``, ``mediapipe``); every teacher has ``name``, ``class_names``,
``label``, ``label_batch`` and ``describe``. Backends import their heavy libraries only
when built.
"""

from shadowtutor.teachers.base import Teacher, TeacherBase, TeacherError
from shadowtutor.teachers.registry import TEACHER_KINDS, build_teacher
from shadowtutor.teachers.writer import write_teacher_labels

__all__ = ["TEACHER_KINDS", "Teacher", "TeacherBase", "TeacherError", "build_teacher", "write_teacher_labels"]
