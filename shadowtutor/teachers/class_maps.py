"""Mapping a teacher's own classes (COCO for Mask R-CNN) onto the task's classes, by name.

A task class takes the source class of the same name (case, ``_`` and ``-`` ignored) plus
the source classes listed for it in :data:`CLASS_ALIASES` (the LVS ``auto`` class is COCO's
car, bus and truck). Every other source class becomes the task's ``background``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from shadowtutor.classes import background_index
from shadowtutor.teachers.base import TeacherError

# The 80 COCO "thing" classes in detectron2's contiguous order (its ``pred_classes``).
COCO_CLASSES: tuple[str, ...] = (
    "person", "bicycle", "car", "motorcycle", "airplane", "bus", "train", "truck", "boat",
    "traffic light", "fire hydrant", "stop sign", "parking meter", "bench", "bird", "cat", "dog",
    "horse", "sheep", "cow", "elephant", "bear", "zebra", "giraffe", "backpack", "umbrella",
    "handbag", "tie", "suitcase", "frisbee", "skis", "snowboard", "sports ball", "kite",
    "baseball bat", "baseball glove", "skateboard", "surfboard", "tennis racket", "bottle",
    "wine glass", "cup", "fork", "knife", "spoon", "bowl", "banana", "apple", "sandwich",
    "orange", "broccoli", "carrot", "hot dog", "pizza", "donut", "cake", "chair", "couch",
    "potted plant", "bed", "dining table", "toilet", "tv", "laptop", "mouse", "remote",
    "keyboard", "cell phone", "microwave", "oven", "toaster", "sink", "refrigerator", "book",
    "clock", "vase", "scissors", "teddy bear", "hair drier", "toothbrush",
)  # fmt: skip

# COCO category ids that the 2017 annotations leave unused; torchvision keeps them as "N/A".
_COCO_UNUSED_IDS = frozenset({12, 26, 29, 30, 45, 66, 68, 69, 71, 83})


def _coco_category_names() -> tuple[str, ...]:
    names = iter(COCO_CLASSES)
    return ("__background__",) + tuple(
        "N/A" if cid in _COCO_UNUSED_IDS else next(names) for cid in range(1, 91)
    )


# torchvision's 91-entry list: index = COCO category id (its detectors' ``labels``).
COCO_CATEGORY_NAMES: tuple[str, ...] = _coco_category_names()

# Task class -> source classes it also takes, besides the one of its own name.
CLASS_ALIASES: dict[str, tuple[str, ...]] = {
    "auto": ("car", "bus", "truck"),
}


def normalise_class_name(name: str) -> str:
    return " ".join(name.lower().replace("_", " ").replace("-", " ").split())


def class_lut(source_names: Sequence[str], target_names: Sequence[str]) -> np.ndarray:
    """``lut[i]`` = index in ``target_names`` of source class ``i`` (the target background if none).

    A source name that is both one target's own name and another's alias goes to the former.
    """
    try:
        background = background_index(tuple(target_names))
    except ValueError as exc:
        raise TeacherError(str(exc)) from None
    lookup: dict[str, int] = {}
    for j, target in enumerate(target_names):
        for alias in CLASS_ALIASES.get(normalise_class_name(target), ()):
            lookup.setdefault(normalise_class_name(alias), j)
    for j, target in enumerate(target_names):
        lookup[normalise_class_name(target)] = j
    return np.array(
        [lookup.get(normalise_class_name(s), background) for s in source_names], dtype=np.int64
    )


def checked_class_lut(
    source_names: Sequence[str], target_names: Sequence[str], source_label: str
) -> np.ndarray:
    """:func:`class_lut`, refusing task classes that no source class can ever produce."""
    lut = class_lut(source_names, target_names)
    reached = set(lut.tolist())
    background = background_index(tuple(target_names))
    missing = [n for j, n in enumerate(target_names) if j != background and j not in reached]
    if missing:
        aliases = ", ".join(f"{k} = {'/'.join(v)}" for k, v in CLASS_ALIASES.items())
        raise TeacherError(
            f"task classes {missing} match no {source_label} class by name (aliases: {aliases}); "
            f"{source_label} classes: {', '.join(n for n in source_names if n != 'N/A')}"
        )
    return lut
