"""The frames the student's backends take: BGR ``uint8`` arrays of shape ``(H, W, 3)`` (numpy only,
no torch)."""

from __future__ import annotations

import numpy as np


def check_frame(frame: np.ndarray) -> np.ndarray:
    """``frame`` as a C-contiguous BGR ``uint8 (H, W, 3)`` array, or a ValueError saying what is
    wrong."""
    if (
        not isinstance(frame, np.ndarray)
        or frame.dtype != np.uint8
        or frame.ndim != 3
        or frame.shape[2] != 3
    ):
        shape = getattr(frame, "shape", None)
        raise ValueError(
            f"expected a BGR uint8 frame of shape (H, W, 3), got {type(frame).__name__} {shape}"
        )
    return np.ascontiguousarray(frame)
