"""Per-frame label maps on disk.

A labels directory holds ``000000.png``, ``000001.png``, ... (frame index, six digits): a
lossless single-channel PNG whose pixel value is the class index, 8-bit (16-bit when a
class index passes 255), readable with ``cv2.imread(path, cv2.IMREAD_UNCHANGED)``. Beside
them ``labels.json`` holds ``{"class_names": [...], ...}`` (who wrote them, from what).

A benchmark scene directory keeps the same files under ``labels/`` and its class names in
``scene.json``; :func:`locate_labels` accepts either layout.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from shadowtutor.teachers.base import TeacherError

METADATA_FILE = "labels.json"
SCENE_FILE = "scene.json"
SCENE_LABELS_DIR = "labels"


def label_path(directory: Path, frame_index: int) -> Path:
    if frame_index < 0:
        raise TeacherError(f"frame indices start at 0, got {frame_index}")
    return directory / f"{frame_index:06d}.png"


def write_label(directory: Path, frame_index: int, labels: np.ndarray) -> Path:
    """Write one ``(H, W)`` label map as PNG (8-bit when it fits, else 16-bit)."""
    import cv2

    if labels.ndim != 2 or labels.size == 0:
        raise TeacherError(
            f"a label map must be a non-empty (H, W) array, got shape {labels.shape}"
        )
    if labels.min() < 0 or labels.max() > 65535:
        raise TeacherError(
            f"label values must lie in [0, 65535] to fit a PNG, got {labels.min()}..{labels.max()}"
        )
    depth = np.uint8 if labels.max() <= 255 else np.uint16
    path = label_path(directory, frame_index)
    if not cv2.imwrite(str(path), labels.astype(depth)):
        raise TeacherError(f"cannot write {path}")
    return path


def read_label(path: Path) -> np.ndarray:
    """One label map as written by :func:`write_label` (``uint8`` or ``uint16``, ``(H, W)``)."""
    import cv2

    labels = cv2.imread(str(path), cv2.IMREAD_UNCHANGED)
    if labels is None:
        raise TeacherError(f"cannot read label map {path}")
    if labels.ndim != 2 or labels.dtype not in (np.uint8, np.uint16):
        raise TeacherError(
            f"{path} is not a single-channel 8- or 16-bit label map (shape {labels.shape}, "
            f"{labels.dtype})"
        )
    return labels


def write_label_metadata(directory: Path, class_names: tuple[str, ...], **info: Any) -> None:
    (directory / METADATA_FILE).write_text(
        json.dumps({"class_names": list(class_names), **info}, indent=2) + "\n"
    )


def _class_names_in(path: Path) -> tuple[str, ...] | None:
    if not path.is_file():
        return None
    try:
        names = json.loads(path.read_text()).get("class_names")
    except (json.JSONDecodeError, AttributeError, OSError) as exc:
        raise TeacherError(f"cannot read class names from {path}: {exc}") from None
    if names is None:
        return None
    if not isinstance(names, list):
        raise TeacherError(f"'class_names' in {path} is not a list")
    return tuple(names)


def locate_labels(directory: str | Path) -> tuple[Path, tuple[str, ...] | None]:
    """``(directory holding the PNGs, stored class names or None)`` for a labels or scene
    directory."""
    directory = Path(directory)
    if not directory.is_dir():
        raise TeacherError(f"labels directory not found: {directory}")
    if (directory / SCENE_LABELS_DIR).is_dir():
        return directory / SCENE_LABELS_DIR, _class_names_in(directory / SCENE_FILE)
    return directory, _class_names_in(directory / METADATA_FILE)
