"""GPUs for a fleet of cameras, from a measured server profile.

A fleet of ``cameras`` cameras like ``load`` (:class:`~shadowtutor_lab.capacity.plan.CameraLoad`)
needs ``ceil(cameras / cameras_per_gpu)`` GPUs of a profile, where ``cameras_per_gpu`` is
:func:`~shadowtutor_lab.capacity.plan.server_capacity`'s figure: one teaching replica per GPU, each
sustaining the profile's key-frame rate. Utilisation is the fleet's key frames per second over what
those GPUs sustain. The figure is an answer for the GPUs' compute only: the ingress, the network and
headroom for a lost replica come on top.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from shadowtutor_lab.capacity.plan import CameraLoad, server_capacity
from shadowtutor_lab.capacity.profile import ServerProfile


@dataclass(frozen=True)
class FleetSize:
    device: str
    profile: str  # the profile's file
    cameras: int
    key_frame_ratio: float
    fps: float
    size: str  # the profile's size used (WxH)
    key_frame_ms: float  # one GPU's time per key frame at the camera's mean steps
    cameras_per_gpu: int
    gpus: int
    utilisation: float  # the fleet's key frames per second / what ``gpus`` GPUs sustain

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def fleet_size(profile: ServerProfile, load: CameraLoad, cameras: int) -> FleetSize:
    """GPUs of ``profile`` for ``cameras`` cameras like ``load``; ValueError when ``cameras`` < 1 or one
    camera alone asks for more key frames per second than one GPU sustains."""
    if cameras < 1:
        raise ValueError(f"the fleet needs at least one camera, got {cameras}")
    capacity = server_capacity(profile, load)
    if capacity.cameras < 1:
        raise ValueError(f"one camera sends {load.key_frames_per_second:.2f} key frames/s, more than one "
                         f"{profile.device} sustains ({capacity.key_frames_per_second:.2f}/s)")
    gpus = math.ceil(cameras / capacity.cameras)
    utilisation = cameras * load.key_frames_per_second / (gpus * capacity.key_frames_per_second)
    return FleetSize(profile.device, profile.path, cameras, load.key_frame_ratio, load.fps, capacity.size,
                     capacity.key_frame_ms, capacity.cameras, gpus, utilisation)
