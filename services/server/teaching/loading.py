"""Building the teacher, the device and the base student from the settings (:func:`load_models`).

The device is resolved once (``auto``: CUDA where usable, else the CPU; a named one checked) and
that one device is given to the teacher and to distillation (:attr:`LoadedModels.device`).

``shadowtutor serve`` calls it before it listens, so that a server whose models cannot load
exits at once with the reason; an app made by ``create_app`` alone calls it in the background
(``/readyz`` tells the progress or the failure).
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from services.server.settings import ServerSettings
from shadowtutor.classes import background_index
from shadowtutor.models.checkpoint import load_student
from shadowtutor.models.student import StudentNet
from shadowtutor.teachers.base import Teacher

log = logging.getLogger(__name__)

PRETRAINED_MODULE = "shadowtutor.models.pretrained"


@dataclass(frozen=True)
class BaseStudent:
    """The pre-trained student every session starts from (a CPU state dict, never trained
    itself)."""

    state_dict: dict[str, torch.Tensor]
    class_names: tuple[str, ...]
    # a checkpoint path, or "fresh" for random initial weights
    source: str

    def instantiate(self) -> StudentNet:
        model = StudentNet(len(self.class_names))
        model.load_state_dict(self.state_dict)
        return model


@dataclass(frozen=True)
class LoadedModels:
    """What a server needs before it can take an edge."""

    teacher: Teacher
    base_student: BaseStudent
    device: torch.device


def load_models(
    settings: ServerSettings,
    teacher: Teacher | None = None,
    progress: Callable[[str], None] = lambda step: None,
) -> LoadedModels:
    """The teacher (``teacher`` if given, else built from the settings), the device and the base
    student.

    The device is :func:`resolve_device` of ``settings.device``, resolved here once; a teacher built
    here gets that device. Blocking; ``progress`` is told each step. Any failure raises (a
    ``TeacherError`` for an unusable device or teacher, ``CheckpointError``, ``ValueError`` for
    classes that do not match...).
    """
    device = resolve_device(settings.device)
    if teacher is None:
        progress(f"loading the {settings.teacher!r} teacher")
        teacher = load_teacher(settings, device)
    class_names = tuple(teacher.class_names)
    # distillation weights pixels near non-background objects
    background_index(class_names)
    progress("loading the student")
    return LoadedModels(
        teacher, load_base_student(settings.student, class_names), torch.device(device)
    )


def resolve_device(device: str) -> str:
    """The ``device`` setting as the one device the server uses: ``cpu``, ``cuda`` or ``cuda:N``
    (``auto``: ``cuda`` where CUDA is usable, else ``cpu``); a TeacherError for one that is not
    usable."""
    from shadowtutor.teachers.device import resolve_torch_device

    return resolve_torch_device(device)


def teacher_options(settings: ServerSettings, device: str) -> dict[str, Any]:
    """Keyword options for ``build_teacher(settings.teacher, ...)``: the named flags plus
    ``teacher_options``, and ``device`` (the resolved one; every backend takes it) unless
    ``teacher_options`` names a device of its own."""
    options = {"device": device, **settings.teacher_options}
    named = {
        "labels_dir": settings.labels_dir,
        "weights_path": settings.weights_path,
        "model_path": settings.onnx_model,
        "class_names": list(settings.teacher_classes) if settings.teacher_classes else None,
        "precision": settings.teacher_precision,
    }
    options.update({key: value for key, value in named.items() if value is not None})
    return options


def load_teacher(settings: ServerSettings, device: str) -> Teacher:
    """The teacher ``settings`` name, on ``device`` (a resolved device: :func:`resolve_device`)."""
    from shadowtutor.teachers import build_teacher

    return build_teacher(settings.teacher, **teacher_options(settings, device))


def default_student_path() -> Path | None:
    """The project's committed pre-trained student, or None while it is not in this install."""
    try:
        module = importlib.import_module(PRETRAINED_MODULE)
    except ModuleNotFoundError as exc:
        if exc.name != PRETRAINED_MODULE:
            raise
        return None
    try:
        path = Path(module.default_student_path())
    except FileNotFoundError:
        return None
    return path if path.is_file() else None


def load_base_student(checkpoint: Path | None, teacher_classes: tuple[str, ...]) -> BaseStudent:
    """The student from ``checkpoint`` (default: the committed one); its classes must be the
    teacher's.

    Without any checkpoint, a freshly initialised student with the teacher's classes (logged
    as a warning: it segments nothing until distillation has trained it).
    """
    path = checkpoint or default_student_path()
    if path is None:
        log.warning(
            "no pre-trained student checkpoint (set SHADOWTUTOR_STUDENT or --student): sessions "
            "start from a freshly initialised student with %d classes",
            len(teacher_classes),
        )
        return BaseStudent(
            _cpu_state(StudentNet(len(teacher_classes))), tuple(teacher_classes), "fresh"
        )
    loaded = load_student(path)
    if tuple(loaded.class_names) != tuple(teacher_classes):
        raise ValueError(
            f"the student {path} has classes {list(loaded.class_names)} but the teacher labels "
            f"{list(teacher_classes)}; they must be the same list in the same order"
        )
    return BaseStudent(_cpu_state(loaded.model), tuple(loaded.class_names), str(path))


def _cpu_state(model: StudentNet) -> dict[str, torch.Tensor]:
    return {key: value.detach().cpu().clone() for key, value in model.state_dict().items()}
