"""Cameras per server and per link from a measured key-frame ratio, and the analytic bounds for an edge.

One camera streaming ``fps`` frames per second at key-frame ratio ``r`` sends the server ``fps * r``
key frames per second. A server that sustains ``1000 / key_frame_ms`` key frames per second of that
size (its profile, :mod:`shadowtutor_lab.capacity.profile`) carries::

    cameras per server = floor(1000 / key_frame_ms / (fps * r))

where ``key_frame_ms`` is the profile's figure, or ``teacher_ms + step_ms * mean_steps`` when the
evaluation's mean distillation steps per key frame differ from the profile's. A link of ``link_bps``
bits per second carries ``floor(link_bps / (8 * uplink bytes per second per camera))`` cameras.

:func:`edge_bounds` gives the throughput and traffic bounds of the ShadowTutor paper's section 4.4 for one edge:
eq. 12 (traffic upper bound), eq. 13 (throughput at the measured key frames and steps, between its
fastest and slowest key-frame time, eq. 2), eq. 14 and eq. 15 (throughput lower and upper bounds),
with the edge's measured per-frame time ``t_si``, the profile's server times and the key frame's
bytes over the link.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from shadowtutor.algorithms.bounds import Latencies, throughput_lower, throughput_upper, traffic_upper
from shadowtutor_lab.capacity.profile import ServerProfile, Size


@dataclass(frozen=True)
class CameraLoad:
    """What one camera asks of the server and the link, measured by an evaluation."""

    fps: float  # the camera's frame rate
    key_frame_ratio: float  # key frames / frames, 0..1
    mean_steps: float | None  # distillation steps per key frame (None: unknown, take the profile's)
    size: Size  # the key frames' size (WxH)
    uplink_bytes_per_frame: float  # edge -> server, averaged over all frames
    downlink_bytes_per_frame: float

    def __post_init__(self) -> None:
        if not (self.fps > 0 and math.isfinite(self.fps)):
            raise ValueError(f"fps must be a finite number > 0, got {self.fps}")
        if not 0 < self.key_frame_ratio <= 1:
            raise ValueError(f"the key-frame ratio must lie in (0, 1], got {self.key_frame_ratio}")

    @property
    def key_frames_per_second(self) -> float:
        return self.fps * self.key_frame_ratio

    @property
    def uplink_bytes_per_second(self) -> float:
        return self.uplink_bytes_per_frame * self.fps


@dataclass(frozen=True)
class ServerCapacity:
    device: str
    profile: str  # the profile's file
    teacher: str  # the teacher the profile measured
    size: str  # the profile's size used (WxH)
    size_exact: bool  # False: the nearest measured size to the camera's
    key_frame_ms: float  # server time per key frame at the camera's mean steps
    key_frames_per_second: float  # the server's sustained rate, 1000 / key_frame_ms
    cameras: int  # floor(server rate / camera's key frames per second)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def server_capacity(profile: ServerProfile, load: CameraLoad) -> ServerCapacity:
    """Cameras like ``load`` that one server of ``profile`` carries (see the module docstring)."""
    size = profile.nearest_size(load.size)
    key_frame_ms = profile.sizes[size].key_frame_ms_at(load.mean_steps)
    rate = 1000.0 / key_frame_ms
    return ServerCapacity(profile.device, profile.path, profile.teacher, f"{size[0]}x{size[1]}", size == load.size,
                          key_frame_ms, rate, math.floor(rate / load.key_frames_per_second))


def cameras_per_link(load: CameraLoad, link_bps: float) -> int | None:
    """Cameras whose uplink fits ``link_bps`` bits per second (None when a camera sends nothing up)."""
    if not link_bps > 0:
        raise ValueError(f"the link must carry > 0 bits per second, got {link_bps}")
    per_camera = 8.0 * load.uplink_bytes_per_second
    return None if per_camera <= 0 else math.floor(link_bps / per_camera)


@dataclass(frozen=True)
class EdgeBounds:
    """The ShadowTutor paper's section 4.4 bounds for one edge and one server: FPS and Mbps."""

    t_si: float
    t_sd: float
    t_ti: float
    t_net: float
    s_net_bytes: float
    traffic_mbps_max: float  # eq. 12
    throughput_fps_measured_min: float  # eq. 13 at the measured k and d, t_c at its eq. 2 upper bound
    throughput_fps_measured_max: float  # eq. 13 at the measured k and d, t_c at its eq. 2 lower bound
    throughput_fps_min: float  # eq. 14
    throughput_fps_max: float  # eq. 15

    def to_dict(self) -> dict[str, float]:
        return asdict(self)


def throughput_at(lat: Latencies, frames: int, key_frames: int, steps: float, min_stride: int,
                  t_c: float) -> float:
    """Eq. 13: ``n / ((n - k MIN_STRIDE) t_si + d t_sd + k t_c)``, with ``n - k MIN_STRIDE`` at least 0."""
    plain = max(0, frames - key_frames * min_stride)
    return frames / (plain * lat.t_si + steps * lat.t_sd + key_frames * t_c)


def edge_bounds(t_si: float, profile_size: Any, key_frame_bytes: float, link_bps: float, frames: int,
                key_frames: int, steps: float, min_stride: int, max_stride: int, max_updates: int) -> EdgeBounds:
    """The bounds for an edge taking ``t_si`` seconds per frame, served by ``profile_size`` (a
    :class:`~shadowtutor_lab.capacity.profile.SizeProfile`), a key frame and its update being
    ``key_frame_bytes`` over a link of ``link_bps``; ``frames``, ``key_frames`` and ``steps`` (all
    distillation steps) are what the evaluation measured."""
    t_net = 8.0 * key_frame_bytes / link_bps
    lat = Latencies(t_si=t_si, t_sd=profile_size.step_ms / 1000.0, t_ti=profile_size.teacher_ms / 1000.0,
                    t_net=t_net, s_net_bytes=key_frame_bytes)
    fastest = max(min_stride * lat.t_si, lat.t_net + lat.t_ti)  # eq. 2, lower bound of t_c
    slowest = min_stride * lat.t_si + lat.t_net + lat.t_ti  # eq. 2, upper bound of t_c
    return EdgeBounds(
        t_si=lat.t_si, t_sd=lat.t_sd, t_ti=lat.t_ti, t_net=lat.t_net, s_net_bytes=key_frame_bytes,
        traffic_mbps_max=traffic_upper(lat, min_stride),
        throughput_fps_measured_min=throughput_at(lat, frames, key_frames, steps, min_stride, slowest),
        throughput_fps_measured_max=throughput_at(lat, frames, key_frames, steps, min_stride, fastest),
        throughput_fps_min=throughput_lower(lat, min_stride, max_updates),
        throughput_fps_max=throughput_upper(lat, min_stride, max_stride),
    )
