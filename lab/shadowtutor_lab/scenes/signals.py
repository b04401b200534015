"""Smooth random signals over frames: the raw material of camera paths, motion and lighting."""

from __future__ import annotations

import numpy as np


def smooth_noise(rng: np.random.Generator, frames: int, fps: float,
                 period_s: tuple[float, float], waves: int = 3, clock: np.ndarray | None = None) -> np.ndarray:
    """A sum of ``waves`` sinusoids with random periods (seconds) and phases, scaled into [-1, 1].

    ``clock``: the signal's own time (seconds) at each frame, if it does not run with the frames
    (a camera that dwells: :func:`dwell_clock`).
    """
    t = np.arange(frames) / fps if clock is None else clock
    periods = rng.uniform(*period_s, size=waves)
    phases = rng.uniform(0.0, 2 * np.pi, size=waves)
    weights = rng.uniform(0.5, 1.0, size=waves)
    signal = (weights[:, None] * np.sin(2 * np.pi * t[None, :] / periods[:, None] + phases[:, None])).sum(0)
    return signal / weights.sum()


def dwell_clock(rng: np.random.Generator, frames: int, fps: float, travel_s: tuple[float, float],
                dwell_s: tuple[float, float], ramp_s: float = 0.4) -> np.ndarray:
    """Seconds of motion at each frame for something that travels and dwells in turn (a patrol tour).

    Travels of ``travel_s`` seconds alternate with dwells of ``dwell_s`` seconds, starting at a
    random point of the cycle; speed eases down and up over ``ramp_s`` (smoothstep), and the
    clock stands still while it dwells.
    """
    t = np.arange(frames) / fps
    speed = np.ones(frames)
    start = -rng.uniform(0.0, travel_s[1] + dwell_s[1])
    while frames and start < t[-1]:
        stop = start + rng.uniform(*travel_s)
        hold = rng.uniform(*dwell_s)
        down = np.clip((t - stop) / ramp_s, 0, 1)
        up = np.clip((t - stop - ramp_s - hold) / ramp_s, 0, 1)
        speed -= down * down * (3 - 2 * down) - up * up * (3 - 2 * up)
        start = stop + hold + 2 * ramp_s
    return np.concatenate([[0.0], np.cumsum(np.clip(speed, 0, 1)[:-1])])[:frames] / fps


def bounce(start: float, velocity: float, low: float, high: float, frames: int) -> np.ndarray:
    """Positions of a point moving at ``velocity`` per frame that reflects off ``low`` and ``high``."""
    if high <= low:
        raise ValueError(f"bounce needs low < high, got {low}, {high}")
    span = high - low
    travelled = np.mod(np.clip(start, low, high) - low + velocity * np.arange(frames), 2 * span)
    return low + span - np.abs(travelled - span)
