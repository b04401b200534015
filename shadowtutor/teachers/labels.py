"""Stored labels as a teacher: precomputed teacher output, or a benchmark scene's ground truth.

The label of frame ``i`` is ``NNNNNN.png`` in the labels directory (format:
:mod:`shadowtutor.teachers.label_store`), resized with nearest neighbour when the frame's
size differs. Labels are looked up by frame index, so ``frame_index`` is required. A scene
directory whose scene records its instances (``instances.json``) also gives their boxes.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from shadowtutor.teachers.base import (
    InstanceTeacherBase,
    TeacherAnswer,
    TeacherError,
    check_class_names,
    label_dtype,
    resize_labels,
)
from shadowtutor.teachers.label_store import label_path, locate_labels, read_label

if TYPE_CHECKING:
    from shadowtutor.scene_store import Scene


class LabelsTeacher(InstanceTeacherBase):
    """``labels_dir``: a directory of ``NNNNNN.png`` (class names from its ``labels.json``) or a
    scene directory (``labels/`` and ``scene.json``); ``class_names`` overrides the stored ones.
    ``device`` is accepted like every backend's and not used: labels are read on the host
    (``cpu``)."""

    name = "labels"

    def __init__(
        self, labels_dir: str | Path, class_names: Sequence[str] | None = None, device: str = "cpu"
    ) -> None:
        self.labels_dir, stored = locate_labels(labels_dir)
        names = class_names if class_names is not None else stored
        if names is None:
            raise TeacherError(
                f"no class names for the labels in {self.labels_dir}: it has no labels.json "
                "(or scene.json): pass class_names=[...]"
            )
        self.class_names = check_class_names(names)
        self.device = "cpu"
        self._scene = _scene_with_instances(self.labels_dir.parent)

    def _teach_batch(
        self, frames: list[np.ndarray], frame_indices: list[int] | None
    ) -> list[TeacherAnswer]:
        if frame_indices is None:
            raise TeacherError(
                "the labels teacher looks labels up by frame: pass frame_index / frame_indices"
            )
        return [
            self._teach(i, *frame.shape[:2]) for frame, i in zip(frames, frame_indices, strict=True)
        ]

    def _teach(self, frame_index: int, height: int, width: int) -> TeacherAnswer:
        labels = self._load(frame_index, height, width)
        if self._scene is None or frame_index >= len(self._scene):
            return TeacherAnswer(labels)
        return TeacherAnswer(labels, self._scene.boxes(frame_index, (width, height)))

    def _load(self, frame_index: int, height: int, width: int) -> np.ndarray:
        path = label_path(self.labels_dir, frame_index)
        try:
            stored = path.is_file()
        except OSError as exc:
            # e.g. a frame index so large that the file name is too long
            raise TeacherError(f"no stored label for frame {frame_index}: {exc.strerror}") from None
        if not stored:
            raise TeacherError(f"no stored label for frame {frame_index}: {path} does not exist")
        labels = read_label(path)
        if labels.max() >= len(self.class_names):
            raise TeacherError(
                f"{path} holds class {labels.max()} but there are {len(self.class_names)} classes"
            )
        return resize_labels(labels, height, width).astype(label_dtype(len(self.class_names)))

    def _details(self) -> dict[str, Any]:
        return {"labels_dir": str(self.labels_dir), "instances": self._scene is not None}


def _scene_with_instances(directory: Path) -> Scene | None:
    """The scene in ``directory`` if it is one that records its instances, else None."""
    from shadowtutor.scene_store import INSTANCES_NAME, Scene, SceneError, SceneMeta

    if not (directory / INSTANCES_NAME).is_file():
        return None
    try:
        return Scene(directory, SceneMeta.read(directory))
    except SceneError:
        return None
