"""Loading and saving student checkpoints.

Two formats load:

* the authors' release: a bare ``state_dict`` (9 LVS classes, background last);
* the project's own: ``{"format": "shadowtutor-student/1", "num_classes", "class_names",
  "state_dict", "metadata"}``, written by :func:`save_student`.
"""

from __future__ import annotations

import pickle
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from shadowtutor.classes import LVS_CLASSES
from shadowtutor.models.student import StudentNet

CHECKPOINT_FORMAT = "shadowtutor-student/1"


class CheckpointError(ValueError):
    """A checkpoint file is missing, unreadable or does not fit the student."""


@dataclass
class LoadedStudent:
    """A student read from a checkpoint file: the network, its class names and the file's metadata
    (how it was trained)."""

    model: StudentNet
    class_names: tuple[str, ...]
    metadata: dict[str, Any] = field(default_factory=dict)


def _num_classes_of(state_dict: Mapping[str, torch.Tensor]) -> int:
    try:
        return int(state_dict["out_conv3.weight"].shape[0])
    except KeyError:
        raise CheckpointError("not a student checkpoint: it has no 'out_conv3.weight'") from None


def student_layout(num_classes: int) -> dict[str, tuple[int, ...]]:
    """The name and shape of every tensor of the state dict of a student for ``num_classes``
    classes: exactly what full weights for it hold."""
    return {
        name: tuple(value.shape) for name, value in StudentNet(num_classes).state_dict().items()
    }


def student_from_state_dict(
    state_dict: Mapping[str, torch.Tensor], class_names: tuple[str, ...] | None = None
) -> StudentNet:
    num_classes = _num_classes_of(state_dict)
    if class_names is not None and len(class_names) != num_classes:
        raise CheckpointError(
            f"{len(class_names)} class names for a student with {num_classes} outputs"
        )
    model = StudentNet(num_classes)
    missing, unexpected = model.load_state_dict(state_dict, strict=False)
    if missing or unexpected:
        raise CheckpointError(
            f"checkpoint does not fit the student: missing {missing}, unexpected {unexpected}"
        )
    return model


def load_student(path: str | Path, class_names: tuple[str, ...] | None = None) -> LoadedStudent:
    """Load a student from either checkpoint format.

    ``class_names`` is needed only for a bare ``state_dict`` whose class count is not the
    authors' nine (for nine, the LVS list is assumed).
    """
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"student checkpoint not found: {path}")
    try:
        blob = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        # torch's message is a page on weights_only; its gist is this
        raise CheckpointError(
            f"cannot read student checkpoint {path}: not a PyTorch checkpoint, or damaged "
            "(unpickling failed)"
        ) from exc
    except Exception as exc:
        # torch raises several types for corrupt files
        raise CheckpointError(f"cannot read student checkpoint {path}: {exc}") from exc
    if not isinstance(blob, Mapping):
        raise CheckpointError(f"{path} holds a {type(blob).__name__}, not a state dict")
    if blob.get("format") == CHECKPOINT_FORMAT:
        names = tuple(blob["class_names"])
        model = student_from_state_dict(blob["state_dict"], names)
        return LoadedStudent(model, names, dict(blob.get("metadata", {})))
    num_classes = _num_classes_of(blob)
    if class_names is None:
        if num_classes != len(LVS_CLASSES):
            raise CheckpointError(
                f"{path} is a bare state dict with {num_classes} classes: pass class_names"
            )
        class_names = LVS_CLASSES
    return LoadedStudent(student_from_state_dict(blob, class_names), tuple(class_names))


def save_student(
    path: str | Path,
    model: StudentNet,
    class_names: tuple[str, ...],
    metadata: Mapping[str, Any] | None = None,
) -> Path:
    """Write the project's checkpoint format (atomically: a crash leaves the old file)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    blob = {
        "format": CHECKPOINT_FORMAT,
        "num_classes": model.num_classes,
        "class_names": list(class_names),
        "state_dict": {k: v.detach().cpu() for k, v in model.state_dict().items()},
        "metadata": dict(metadata or {}),
    }
    tmp = path.with_suffix(path.suffix + ".tmp")
    torch.save(blob, tmp)
    tmp.replace(path)
    return path
