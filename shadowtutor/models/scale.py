"""The student's input scale: run the student on frames resized to the size it was trained at.

With a student size ``(W, H)`` the edge resizes each frame to ``W x H`` (area interpolation)
before the student and upsamples its label map to the frame's size (nearest neighbour); the
server's copy trains on the same resized key frame with the teacher's labels downsampled to
``W x H`` (nearest) and its instance boxes scaled, so both copies see exactly the same input.
The student network and Algorithms 1 and 2 are unchanged. ``None`` runs at the frame's size.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

# (width, height)
Size = tuple[int, int]


def check_size(size: Size | None) -> Size | None:
    """``size`` as a ``(width, height)`` tuple of positive ints, or a ValueError."""
    if size is None:
        return None
    width, height = (int(v) for v in size)
    if width <= 0 or height <= 0:
        raise ValueError(f"the student size must be positive, got {width}x{height}")
    return width, height


def parse_size(text: str) -> Size | None:
    """``"WxH"`` -> ``(W, H)``; ``""``, ``"native"`` or ``"none"`` -> None (the frame's own
    size)."""
    text = text.strip().lower()
    if text in ("", "native", "none"):
        return None
    try:
        width, height = (int(v) for v in text.split("x"))
    except ValueError:
        raise ValueError(
            f"expected WIDTHxHEIGHT such as 320x180, or 'native', got {text!r}"
        ) from None
    return check_size((width, height))


def format_size(size: Size | None) -> str:
    return "native" if size is None else f"{size[0]}x{size[1]}"


def _resize(image: np.ndarray, size: Size, nearest: bool) -> np.ndarray:
    import cv2  # here, so that settings can parse sizes without loading OpenCV

    return cv2.resize(image, size, interpolation=cv2.INTER_NEAREST if nearest else cv2.INTER_AREA)


def setting(value: Any) -> Size | None:
    """A settings field's value (``"WxH"``, ``"native"``, a pair or None) as a student size."""
    return parse_size(value) if isinstance(value, str) else check_size(value)


def frame_to_student(frame: np.ndarray, size: Size | None) -> np.ndarray:
    """The BGR frame the student sees: resized to ``size`` (area), or as it is."""
    if size is None or (frame.shape[1], frame.shape[0]) == size:
        return frame
    return _resize(frame, size, nearest=False)


def labels_to_student(labels: np.ndarray, size: Size | None) -> np.ndarray:
    """A label map resized to ``size`` by nearest neighbour (the teacher's labels for the server's
    copy)."""
    if size is None or (labels.shape[1], labels.shape[0]) == size:
        return labels
    return _resize(labels, size, nearest=True)


def labels_to_frame(labels: np.ndarray, frame_shape: tuple[int, ...]) -> np.ndarray:
    """The student's label map upsampled (nearest) to ``frame_shape[:2]`` = ``(H, W)``."""
    height, width = frame_shape[:2]
    if labels.shape[:2] == (height, width):
        return labels
    return _resize(labels, (width, height), nearest=True)


def boxes_to_student(
    boxes: np.ndarray | None, frame_shape: tuple[int, ...], size: Size | None
) -> np.ndarray | None:
    """Instance boxes ``(N, 4)`` (``x0, y0, x1, y1`` in frame pixels) in the student's pixels."""
    if boxes is None or size is None:
        return boxes
    height, width = frame_shape[:2]
    factors = np.array([size[0] / width, size[1] / height] * 2, dtype=np.float64)
    return np.asarray(boxes, dtype=np.float64) * factors


def infer_scaled(
    infer: Callable[[np.ndarray], np.ndarray], frame: np.ndarray, size: Size | None
) -> np.ndarray:
    """``infer`` (a student's labels of a BGR frame) run at ``size``, its labels at the frame's
    size."""
    if size is None:
        return infer(frame)
    return labels_to_frame(infer(frame_to_student(frame, size)), frame.shape)
