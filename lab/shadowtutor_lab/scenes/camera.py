"""Camera regimes of the LVS videos: fixed, moving (pan and zoom) and egocentric (shake, fast turns).

A moving camera may also *dwell* (``dwell_s``): it travels and holds still in turn, as a
pan-tilt-zoom camera on a patrol tour or a vehicle in traffic does.

A camera path maps the background canvas ("world", pixels) to the frame for every frame:
``screen = zoom * R(roll) * (world - centre) + frame_centre``. The smooth part of the centre
(without shake and sudden turns) is what tracked subjects follow.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np

from shadowtutor_lab.scenes.signals import dwell_clock, smooth_noise

Regime = Literal["fixed", "moving", "egocentric"]


@dataclass(frozen=True)
class CameraParams:
    """Amplitudes are fractions of the frame width (pan, turns) or height (tilt, shake)."""

    regime: Regime
    pan: float = 0.0  # smooth horizontal pan amplitude
    tilt: float = 0.0  # smooth vertical pan amplitude
    pan_period_s: tuple[float, float] = (6.0, 14.0)
    zoom: float = 0.0  # the zoom varies within [1, 1 + zoom]
    shake: float = 0.0  # hand or head shake amplitude
    roll_deg: float = 0.0
    turns_per_min: float = 0.0  # sudden head turns: look away fast and back
    turn: float = 0.0  # amplitude of a turn
    dwell_s: tuple[float, float] | None = None  # holds still this long between travels (None: never)
    travel_s: tuple[float, float] = (1.0, 3.0)  # how long each travel between dwells lasts

    def __post_init__(self) -> None:
        if self.regime not in ("fixed", "moving", "egocentric"):
            raise ValueError(f"unknown camera regime {self.regime!r}")
        values = (self.pan, self.tilt, self.zoom, self.shake, self.roll_deg, self.turns_per_min, self.turn)
        if min(values) < 0:
            raise ValueError(f"camera amplitudes must be >= 0, got {self}")
        if self.regime == "fixed" and max(values) > 0:
            raise ValueError("a fixed camera cannot pan, zoom, shake or turn")
        if self.dwell_s is not None and not (0 < self.dwell_s[0] <= self.dwell_s[1]
                                             and 0 < self.travel_s[0] <= self.travel_s[1]):
            raise ValueError(f"dwell and travel times must be positive ranges (low <= high), got {self}")
        if self.dwell_s is not None and self.regime != "moving":
            raise ValueError("only a moving camera dwells")


@dataclass(frozen=True)
class CameraPath:
    view: tuple[int, int]  # frame (w, h)
    canvas: tuple[int, int]  # background canvas (w, h)
    centre: np.ndarray  # (F, 2) world point at the frame centre
    smooth: np.ndarray  # (F, 2) the centre without shake and turns
    zoom: np.ndarray  # (F,)
    roll: np.ndarray  # (F,) degrees

    def matrix(self, frame: int) -> np.ndarray:
        """3x3 world -> screen transform of ``frame``."""
        z, a = self.zoom[frame], math.radians(self.roll[frame])
        c, s = z * math.cos(a), z * math.sin(a)
        cx, cy = self.centre[frame]
        w, h = self.view
        return np.array([[c, -s, w / 2 - c * cx + s * cy],
                         [s, c, h / 2 - s * cx - c * cy],
                         [0.0, 0.0, 1.0]])


def _turns(rng: np.random.Generator, frames: int, fps: float, per_min: float) -> np.ndarray:
    """Sum of look-away-and-back bumps with random sign, clipped to [-1, 1]."""
    out = np.zeros(frames)
    t = np.arange(frames) / fps
    count = rng.poisson(per_min * frames / fps / 60.0)
    for start in rng.uniform(0, frames / fps, size=count):
        rise, hold = rng.uniform(0.15, 0.35), rng.uniform(0.4, 1.5)
        up = np.clip((t - start) / rise, 0, 1)
        down = np.clip((t - start - rise - hold) / (2 * rise), 0, 1)
        bump = up * up * (3 - 2 * up) - down * down * (3 - 2 * down)  # smoothsteps
        out += rng.choice([-1.0, 1.0]) * rng.uniform(0.5, 1.0) * bump
    return np.clip(out, -1.0, 1.0)


def camera_path(params: CameraParams, frames: int, fps: float, view: tuple[int, int],
                rng: np.random.Generator) -> CameraPath:
    """Draw a camera path of ``frames`` frames; the canvas is sized so the view stays on it."""
    w, h = view
    roll_margin = math.sin(math.radians(params.roll_deg))
    margin_x = params.pan * w + params.turn * w + params.shake * h + roll_margin * h / 2
    margin_y = params.tilt * h + params.shake * h + roll_margin * w / 2
    canvas = (w + 2 * math.ceil(margin_x), h + 2 * math.ceil(margin_y))
    c0 = np.array([canvas[0] / 2, canvas[1] / 2])
    if params.regime == "fixed":
        centre = np.tile(c0, (frames, 1))
        return CameraPath(view, canvas, centre, centre.copy(), np.ones(frames), np.zeros(frames))
    period = params.pan_period_s
    clock = None if params.dwell_s is None else dwell_clock(rng, frames, fps, params.travel_s, params.dwell_s)
    smooth = c0 + np.stack([params.pan * w * smooth_noise(rng, frames, fps, period, clock=clock),
                            params.tilt * h * smooth_noise(rng, frames, fps, period, clock=clock)], axis=1)
    zoom = 1.0 + params.zoom * 0.5 * (1.0 + smooth_noise(rng, frames, fps, period, clock=clock))
    shake = params.shake * h * np.stack([smooth_noise(rng, frames, fps, (0.1, 0.5), waves=4)
                                         for _ in range(2)], axis=1)
    turns = params.turn * w * _turns(rng, frames, fps, params.turns_per_min)
    centre = smooth + shake + np.stack([turns, 0.3 * turns * rng.uniform(-1, 1)], axis=1)
    roll = params.roll_deg * smooth_noise(rng, frames, fps, (0.5, 3.0))
    return CameraPath(view, canvas, centre, smooth, zoom, roll)
