"""The teacher interface: a BGR frame in, a per-pixel class-index map out.

Callers type against :class:`Teacher` and use its attributes and methods, all of which every
teacher has; backends subclass :class:`TeacherBase`, which checks the input and routes single
frames through the batched path. Teachers that know instances (Mask R-CNN, scenes with their
ground truth) also give the instances' boxes in :meth:`Teacher.teach_batch`'s answers (None where
the teacher gives none).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol, runtime_checkable

import numpy as np


class TeacherError(ValueError):
    """A teacher cannot be built or cannot label the given input (the message says why)."""


@runtime_checkable
class Teacher(Protocol):
    """Labels frames with indices into ``class_names``, on ``device`` (``cpu``, ``cuda:0``...)."""

    name: str
    class_names: tuple[str, ...]
    device: str

    def label(self, frame_bgr: np.ndarray, frame_index: int | None = None) -> np.ndarray:
        """BGR ``uint8`` ``(H, W, 3)`` -> class indices ``(H, W)`` (``uint8``, or ``int64`` past 256
        classes)."""
        ...

    def label_batch(
        self, frames: Sequence[np.ndarray], frame_indices: Sequence[int] | None = None
    ) -> list[np.ndarray]:
        """Label several frames at once (one forward pass where the backend allows)."""
        ...

    def teach_batch(
        self, frames: Sequence[np.ndarray], frame_indices: Sequence[int] | None = None
    ) -> list[TeacherAnswer]:
        """Like :meth:`label_batch`, with the instances' boxes where the teacher knows instances."""
        ...

    def describe(self) -> dict[str, Any]:
        """JSON-ready summary: ``backend``, ``device``, ``class_names`` and backend details."""
        ...


@dataclass(frozen=True)
class TeacherAnswer:
    """A teacher's answer for one frame: the label map and, where the teacher has instances, their
    boxes ``(N, 4)`` float ``x0, y0, x1, y1`` in the frame's pixels (every instance the teacher
    kept, of any class, including those its label map cannot show)."""

    labels: np.ndarray
    boxes: np.ndarray | None = None


def label_dtype(num_classes: int) -> type[np.integer]:
    """``uint8`` while every class index fits in it, else ``int64``."""
    return np.uint8 if num_classes <= 256 else np.int64


def check_frame(frame: Any) -> np.ndarray:
    """Return ``frame`` if it is a non-empty BGR ``uint8`` ``(H, W, 3)`` array, else raise."""
    if not isinstance(frame, np.ndarray):
        raise TeacherError(f"a frame must be a NumPy array, got {type(frame).__name__}")
    if frame.ndim != 3 or frame.shape[2] != 3 or frame.shape[0] == 0 or frame.shape[1] == 0:
        raise TeacherError(f"a frame must have shape (H, W, 3), got {frame.shape}")
    if frame.dtype != np.uint8:
        raise TeacherError(f"a frame must be uint8 BGR, got dtype {frame.dtype}")
    return frame


def resize_labels(labels: np.ndarray, height: int, width: int) -> np.ndarray:
    """Nearest-neighbour resize of a ``(h, w)`` label map (any integer dtype) to ``(height,
    width)``.

    Each output pixel takes the label under its centre, so no new class values appear.
    """
    h, w = labels.shape
    if (h, w) == (height, width):
        return labels
    rows = np.minimum(((np.arange(height) + 0.5) * (h / height)).astype(np.intp), h - 1)
    cols = np.minimum(((np.arange(width) + 0.5) * (w / width)).astype(np.intp), w - 1)
    return labels[rows[:, None], cols[None, :]]


def check_class_names(class_names: Sequence[str]) -> tuple[str, ...]:
    names = tuple(class_names)
    if not names or not all(isinstance(n, str) and n for n in names):
        raise TeacherError(
            f"class names must be a non-empty list of non-empty strings, got {class_names!r}"
        )
    if len(set(names)) != len(names):
        raise TeacherError(f"class names must be unique, got {list(names)}")
    return names


def check_threshold(name: str, value: float) -> float:
    value = float(value)
    if not 0.0 <= value <= 1.0:
        raise TeacherError(f"{name} must lie in [0, 1], got {value}")
    return value


class TeacherBase(ABC):
    """Shared plumbing: input checks, ``label`` via ``label_batch``, ``describe``."""

    name: ClassVar[str]
    class_names: tuple[str, ...]
    device: str

    def label(self, frame_bgr: np.ndarray, frame_index: int | None = None) -> np.ndarray:
        return self.label_batch([frame_bgr], None if frame_index is None else [frame_index])[0]

    def label_batch(
        self, frames: Sequence[np.ndarray], frame_indices: Sequence[int] | None = None
    ) -> list[np.ndarray]:
        checked, indices = self._checked(frames, frame_indices)
        return self._label_batch(checked, indices) if checked else []

    def teach_batch(
        self, frames: Sequence[np.ndarray], frame_indices: Sequence[int] | None = None
    ) -> list[TeacherAnswer]:
        """Like :meth:`label_batch`, with the instances' boxes where the backend has them."""
        checked, indices = self._checked(frames, frame_indices)
        return self._teach_batch(checked, indices) if checked else []

    @staticmethod
    def _checked(
        frames: Sequence[np.ndarray], frame_indices: Sequence[int] | None
    ) -> tuple[list[np.ndarray], list[int] | None]:
        checked = [check_frame(f) for f in frames]
        if frame_indices is None:
            return checked, None
        indices = [int(i) for i in frame_indices]
        if len(indices) != len(checked):
            raise TeacherError(f"{len(checked)} frames but {len(indices)} frame indices")
        return checked, indices

    @abstractmethod
    def _label_batch(
        self, frames: list[np.ndarray], frame_indices: list[int] | None
    ) -> list[np.ndarray]:
        """Label checked frames; each result is ``(H, W)`` of :func:`label_dtype` for its frame."""

    def _teach_batch(
        self, frames: list[np.ndarray], frame_indices: list[int] | None
    ) -> list[TeacherAnswer]:
        """Labels and boxes of checked frames; backends that know instances override it."""
        return [TeacherAnswer(labels) for labels in self._label_batch(frames, frame_indices)]

    def _details(self) -> dict[str, Any]:
        """Backend-specific entries for :meth:`describe`."""
        return {}

    def describe(self) -> dict[str, Any]:
        return {
            "backend": self.name,
            "device": self.device,
            "class_names": list(self.class_names),
            **self._details(),
        }


class InstanceTeacherBase(TeacherBase):
    """A backend that knows instances: it implements :meth:`_teach_batch`, the labels come from
    it."""

    @abstractmethod
    def _teach_batch(
        self, frames: list[np.ndarray], frame_indices: list[int] | None
    ) -> list[TeacherAnswer]:
        """Labels and instance boxes of checked frames."""

    def _label_batch(
        self, frames: list[np.ndarray], frame_indices: list[int] | None
    ) -> list[np.ndarray]:
        return [teaching.labels for teaching in self._teach_batch(frames, frame_indices)]
