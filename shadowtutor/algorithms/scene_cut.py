"""Scene cuts on the edge: a cheap measure of how much a frame differs from the one before.

Each frame is reduced to a small grey thumbnail (:data:`THUMBNAIL` pixels, area averaging, so
noise and small moving objects average out); the change of a frame is the mean absolute
difference of its thumbnail and the previous frame's, as a share of the grey range (0: the same,
1: black to white everywhere). A camera's motion moves the thumbnail by a pixel or two between
frames; a cut replaces it (docs/design/clock.md has the measured values).
"""

from __future__ import annotations

import cv2
import numpy as np

# thumbnail width and height
THUMBNAIL = (32, 18)


def thumbnail(frame_bgr: np.ndarray) -> np.ndarray:
    """``frame_bgr`` (uint8, H x W x 3) as a :data:`THUMBNAIL` grey image, float32 in [0, 1]: every
    n-th pixel of the frame, n chosen to leave at least four per thumbnail pixel each way, then
    averaged (area) down to the thumbnail."""
    height, width = frame_bgr.shape[:2]
    step = max(1, min(height // (4 * THUMBNAIL[1]), width // (4 * THUMBNAIL[0])))
    sampled = frame_bgr[::step, ::step]
    grey = cv2.cvtColor(
        cv2.resize(sampled, THUMBNAIL, interpolation=cv2.INTER_AREA), cv2.COLOR_BGR2GRAY
    )
    return grey.astype(np.float32) / 255.0


class CutDetector:
    """Says which frames start a new scene: those whose change from the previous frame exceeds
    ``threshold`` in (0, 1]. The first frame is no cut. ValueError for a threshold outside."""

    def __init__(self, threshold: float) -> None:
        if not 0.0 < threshold <= 1.0:
            raise ValueError(f"a cut threshold lies in (0, 1], got {threshold}")
        self.threshold = threshold
        self._previous: np.ndarray | None = None

    def change(self, frame_bgr: np.ndarray) -> float:
        """The frame's change from the previous frame given (0 for the first); remembers it."""
        current = thumbnail(frame_bgr)
        previous, self._previous = self._previous, current
        if previous is None or previous.shape != current.shape:
            return 0.0
        return float(np.mean(np.abs(current - previous)))

    def is_cut(self, frame_bgr: np.ndarray) -> bool:
        """Whether the frame starts a new scene (its :meth:`change` exceeds the threshold)."""
        return self.change(frame_bgr) > self.threshold
