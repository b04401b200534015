"""Smooth random signals over frames: the raw material of camera paths, motion and lighting."""

from __future__ import annotations

import numpy as np


def smooth_noise(rng: np.random.Generator, frames: int, fps: float,
                 period_s: tuple[float, float], waves: int = 3) -> np.ndarray:
    """A sum of ``waves`` sinusoids with random periods (seconds) and phases, scaled into [-1, 1]."""
    t = np.arange(frames) / fps
    periods = rng.uniform(*period_s, size=waves)
    phases = rng.uniform(0.0, 2 * np.pi, size=waves)
    weights = rng.uniform(0.5, 1.0, size=waves)
    signal = (weights[:, None] * np.sin(2 * np.pi * t[None, :] / periods[:, None] + phases[:, None])).sum(0)
    return signal / weights.sum()


def bounce(start: float, velocity: float, low: float, high: float, frames: int) -> np.ndarray:
    """Positions of a point moving at ``velocity`` per frame that reflects off ``low`` and ``high``."""
    if high <= low:
        raise ValueError(f"bounce needs low < high, got {low}, {high}")
    span = high - low
    travelled = np.mod(np.clip(start, low, high) - low + velocity * np.arange(frames), 2 * span)
    return low + span - np.abs(travelled - span)
