"""Inputs for timing the batched distillation engine: per session a noise frame with block labels."""

from __future__ import annotations

import numpy as np

from shadowtutor.classes import LVS_CLASSES, background_index


def key_frames(sessions: int, width: int, height: int, seed: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per session a BGR frame ``(height, width, 3)`` uint8 and labels ``(height, width)``: blocks of a few
    classes (the background among them), the frame noise tinted by each block's class."""
    rng = np.random.default_rng(seed)
    classes = len(LVS_CLASSES)
    block = max(4, height // 8)
    rows, cols = -(-height // block), -(-width // block)
    inputs = []
    for _ in range(sessions):
        present = rng.choice(classes, size=3, replace=False)
        present[0] = background_index(LVS_CLASSES)
        grid = rng.choice(present, size=(rows, cols)).astype(np.uint8)
        label = np.kron(grid, np.ones((block, block), np.uint8))[:height, :width]
        tint = rng.integers(0, 128, (classes, 3))
        frame = (rng.integers(0, 128, (height, width, 3)) + tint[label]).astype(np.uint8)
        inputs.append((frame, label))
    return inputs
