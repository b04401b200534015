"""Teachers: frame in, per-pixel class labels out.

``build_teacher(kind, **options)`` makes one of :data:`TEACHER_KINDS` (``maskrcnn``, ``detectron2``,
``onnx``, ``labels``, ``mediapipe``); every teacher has what :class:`Teacher` states: ``name``,
``class_names``, ``device``, ``label``, ``label_batch``, ``teach_batch`` (with instance boxes
where a teacher has them: ``maskrcnn``, ``detectron2``, ``labels`` of a scene) and ``describe``.
Backends import their heavy libraries only when built.
"""

from shadowtutor.teachers.base import Teacher, TeacherAnswer, TeacherBase, TeacherError
from shadowtutor.teachers.registry import TEACHER_KINDS, build_teacher
from shadowtutor.teachers.writer import write_teacher_labels

__all__ = [
    "TEACHER_KINDS",
    "Teacher",
    "TeacherBase",
    "TeacherError",
    "TeacherAnswer",
    "build_teacher",
    "write_teacher_labels",
]
