from __future__ import annotations

import math

import pytest

from shadowtutor.algorithms.bounds import Latencies, throughput_lower, throughput_upper, traffic_upper
from shadowtutor_lab.capacity.plan import CameraLoad, cameras_per_link, edge_bounds, server_capacity, throughput_at
from shadowtutor_lab.capacity.profile import ServerProfile, SizeProfile

H200 = ServerProfile("h200.json", "NVIDIA H200", "2026-11-26", "shadowtutor bench server", "maskrcnn",
                     {(1280, 720): SizeProfile(teacher_ms=14.2, step_ms=1.8, key_frame_ms=20.5, steps=8, sessions=64)})


def load(ratio: float, steps: float | None = 8, size: tuple[int, int] = (1280, 720)) -> CameraLoad:
    return CameraLoad(fps=30.0, key_frame_ratio=ratio, mean_steps=steps, size=size, uplink_bytes_per_frame=1000.0,
                      downlink_bytes_per_frame=500.0)


def test_cameras_per_server_is_the_server_rate_over_the_camera_rate() -> None:
    capacity = server_capacity(H200, load(0.05))
    # 1000 / 20.5 = 48.78 key frames/s; a camera sends 30 * 0.05 = 1.5
    assert capacity.key_frames_per_second == pytest.approx(1000 / 20.5)
    assert capacity.cameras == math.floor(1000 / 20.5 / 1.5) == 32
    assert capacity.size == "1280x720" and capacity.size_exact


def test_fewer_steps_per_key_frame_carry_more_cameras() -> None:
    capacity = server_capacity(H200, load(0.05, steps=2.0))
    assert capacity.key_frame_ms == pytest.approx(14.2 + 1.8 * 2.0)
    assert capacity.cameras == math.floor(1000 / (14.2 + 3.6) / 1.5)


def test_another_size_uses_the_nearest_measured_and_says_so() -> None:
    capacity = server_capacity(H200, load(0.05, size=(640, 360)))
    assert capacity.size == "1280x720" and not capacity.size_exact


def test_cameras_per_link() -> None:
    # 1000 bytes per frame at 30 fps = 240 kbit/s
    assert cameras_per_link(load(0.05), 80e6) == math.floor(80e6 / 240e3)
    with pytest.raises(ValueError):
        cameras_per_link(load(0.05), 0)


@pytest.mark.parametrize("ratio", [0.0, 1.5, float("nan")])
def test_a_camera_load_needs_a_key_frame_ratio_in_0_1(ratio: float) -> None:
    with pytest.raises(ValueError):
        load(ratio)


def test_eq_13_at_the_extremes_is_eqs_14_and_15() -> None:
    lat = Latencies(t_si=0.05, t_sd=0.013, t_ti=0.044, t_net=0.303, s_net_bytes=3.0e6)
    n, min_stride, max_stride, max_updates = 6400, 8, 64, 8
    slowest = min_stride * lat.t_si + lat.t_net + lat.t_ti
    fastest = max(min_stride * lat.t_si, lat.t_net + lat.t_ti)
    k = n // min_stride
    assert throughput_at(lat, n, k, k * max_updates, min_stride, slowest) == pytest.approx(
        throughput_lower(lat, min_stride, max_updates))
    k = n // max_stride
    assert throughput_at(lat, n, k, 0, min_stride, fastest) == pytest.approx(
        throughput_upper(lat, min_stride, max_stride))


def test_edge_bounds_use_the_profile_and_the_link() -> None:
    size = H200.sizes[1280, 720]
    bounds = edge_bounds(t_si=0.05, profile_size=size, key_frame_bytes=100_000, link_bps=80e6, frames=100,
                         key_frames=5, steps=20, min_stride=8, max_stride=64, max_updates=8)
    assert bounds.t_net == pytest.approx(100_000 * 8 / 80e6)
    assert bounds.t_ti == pytest.approx(0.0142) and bounds.t_sd == pytest.approx(0.0018)
    lat = Latencies(t_si=0.05, t_sd=0.0018, t_ti=0.0142, t_net=bounds.t_net, s_net_bytes=100_000)
    assert bounds.traffic_mbps_max == pytest.approx(traffic_upper(lat, 8))
    assert bounds.throughput_fps_min <= bounds.throughput_fps_measured_min <= bounds.throughput_fps_measured_max
    assert bounds.throughput_fps_measured_max <= bounds.throughput_fps_max
