"""Object trajectories: where each object stands, how big, tilted and in which gait phase, per frame.

Objects move on the ground plane of the background canvas (birds fly above it). Position is
kept relative to the camera's smooth centre, scaled by a per-object ``follow`` factor, so that
a moving camera keeps its subjects roughly in view the way a camera operator does; depth
(0 = at the horizon, 1 = nearest) sets the size, the height on the ground and the z-order.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from shadowtutor_lab.scenes.camera import CameraPath
from shadowtutor_lab.scenes.signals import bounce, smooth_noise
from shadowtutor_lab.scenes.sprites import SPECS

HORIZON = 0.42  # the horizon's height in the frame at the start of a shot, fraction from the top


@dataclass(frozen=True)
class Track:
    """Per-frame pose of one object in canvas ("world") pixels."""

    class_name: str
    x: np.ndarray  # anchor (bottom centre) position
    y: np.ndarray
    height: np.ndarray  # on-screen height at zoom 1
    angle: np.ndarray  # degrees, counter-clockwise on screen
    facing: np.ndarray  # +1 right, -1 left
    phase: np.ndarray  # gait phase in [0, 1)
    depth: np.ndarray  # 0 far .. 1 near: the z-order


def depth_scale(depth: np.ndarray) -> np.ndarray:
    return 0.5 + 0.7 * depth


def _velocity(a: np.ndarray) -> np.ndarray:
    """Per-frame change of ``a`` (zero for a one-frame shot)."""
    return np.gradient(a) if len(a) > 1 else np.zeros_like(a)


def _facing(vx: np.ndarray, initial: float) -> np.ndarray:
    """Direction of travel with hysteresis, so a pause does not flip the sprite back and forth."""
    out = np.empty_like(vx)
    current = initial
    for i, v in enumerate(vx):
        if abs(v) > 0.05:
            current = 1.0 if v > 0 else -1.0
        out[i] = current
    return out


def make_track(rng: np.random.Generator, class_name: str, camera: CameraPath, fps: float,
               start_x: float, speed: float, scale: float) -> Track:
    """A trajectory for one object starting at ``start_x`` (fraction of the frame width from the centre).

    ``speed`` and ``scale`` multiply the class's natural speed and size.
    """
    spec = SPECS[class_name]
    frames = len(camera.centre)
    w, h = camera.view
    depth = bounce(rng.uniform(0.05, 0.95), rng.choice([-1, 1]) * rng.uniform(0.03, 0.1) / fps,
                      0.0, 1.0, frames)
    height = spec.height * h * depth_scale(depth) * scale
    px_per_frame = spec.speed * speed * float(height.mean()) / fps
    local_x = bounce(start_x * w, rng.choice([-1, 1]) * px_per_frame * rng.uniform(0.7, 1.3),
                        -0.62 * w, 0.62 * w, frames)
    follow = rng.uniform(0.75, 1.0)
    c0 = np.array(camera.canvas, np.float64) / 2
    x = c0[0] + follow * (camera.smooth[:, 0] - c0[0]) + local_x
    horizon = (HORIZON - 0.5) * h  # relative to the canvas centre
    ground = horizon + (0.1 + 0.88 * depth) * (0.5 * h - horizon)
    wobble = spec.tilt * smooth_noise(rng, frames, fps, (1.0, 4.0))
    if spec.flies:
        altitude = (0.12 + 0.22 * (1 + smooth_noise(rng, frames, fps, (2.0, 6.0)))) * h
        y = c0[1] + horizon - altitude + 0.5 * height
        pitch = np.degrees(np.arctan2(-_velocity(y), np.abs(_velocity(x)) + 1e-6))  # nose up when climbing
        angle = wobble + 0.6 * pitch
        phase = np.mod(rng.uniform() + spec.stride * np.arange(frames) / fps, 1.0)
    else:
        y = c0[1] + ground
        angle = wobble
        travelled = np.concatenate([[0.0], np.cumsum(np.abs(np.diff(x)))])
        phase = np.mod(rng.uniform() + spec.stride * travelled / height, 1.0)
    vx = _velocity(x)
    facing = _facing(vx, 1.0 if vx[0] >= 0 else -1.0)
    return Track(class_name, x, y, height, angle * facing, facing, phase, depth)
