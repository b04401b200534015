"""Frames with known motion for flow tests: a smooth random texture, and a camera panning over it."""

from __future__ import annotations

import cv2
import numpy as np


def textured(height: int = 180, width: int = 320, seed: int = 0) -> np.ndarray:
    """A smooth random texture (BGR uint8), so that optical flow has something to follow."""
    noise = np.random.default_rng(seed).integers(0, 255, (height // 8, width // 8, 3), dtype=np.uint8)
    return cv2.resize(noise, (width, height), interpolation=cv2.INTER_CUBIC)


def panning(frames: int, step: int = 2, size: tuple[int, int] = (320, 180)) -> list[np.ndarray]:
    """``frames`` views of one texture, the camera moving ``step`` pixels right per frame."""
    width, height = size
    world = textured(height + 20, width + 10 + step * frames, seed=1)
    return [np.ascontiguousarray(world[10:10 + height, 10 + step * t:10 + width + step * t]) for t in range(frames)]
