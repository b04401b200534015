"""The report's maths against a hand-worked run: rates, Table 1 components, bounds, checks, ratios."""

from __future__ import annotations

from dataclasses import replace

import pytest

from shadowtutor.algorithms.params import AlgorithmParams
from shadowtutor_lab.netbench.analysis import BoundCheck, components, mean_or_none, retention, run_metrics
from shadowtutor_lab.netbench.results import RunRecord, ServerWork

PARAMS = AlgorithmParams()  # MIN_STRIDE 8, MAX_STRIDE 64, MAX_UPDATES 8


def shadow_run(**overrides: object) -> RunRecord:
    values = dict(
        scene="s", bandwidth_mbps=80.0, variant="shadowtutor", frames=100, labelled_frames=100, key_frames=10,
        frames_sent=10, loop_seconds=10.0, wall_seconds=12.5, waited_seconds=2.0,
        bytes_sent=1_000_200, bytes_received=3_900_000, handshake_bytes_sent=200, handshake_bytes_received=900_000,
        wire_bytes_up=1_100_000, wire_bytes_down=4_100_000, updates_applied=10, miou_percent=70.0,
        update_roundtrip_seconds=[0.5, 1.0, 0.75],
        server=ServerWork(teacher_seconds=0.5, teacher_count=10, distill_seconds=4.0, distill_count=10, steps=40),
    )
    values.update(overrides)
    return RunRecord(**values)


def test_rates_and_sizes_leave_the_handshake_out() -> None:
    m = run_metrics(shadow_run(), PARAMS)
    assert m.fps == pytest.approx(10.0)  # 100 frames / 10 s of frame loop
    assert m.payload_bytes == 4_000_000
    assert m.mbps == pytest.approx(3.2)  # 4 MB * 8 / 10 s
    assert m.bytes_per_frame == pytest.approx(40_000)
    assert (m.up_per_key_frame, m.down_per_key_frame, m.s_net) == (100_000, 300_000, 400_000)
    assert m.key_frame_ratio == pytest.approx(0.1)
    assert m.wire_bytes_per_frame == pytest.approx(52_000)
    assert m.startup_seconds == pytest.approx(2.5)


def test_table1_components() -> None:
    lat = components(shadow_run())
    assert lat.t_si == pytest.approx(0.08)  # (10 s - 2 s waited) / 100 frames
    assert lat.t_ti == pytest.approx(0.05)  # 0.5 s / 10 key frames
    assert lat.t_sd == pytest.approx(0.1)  # 4 s / 40 steps
    assert lat.t_net == pytest.approx(0.30)  # mean round trip 0.75 - (0.05 + 4 s / 10)
    assert lat.s_net_bytes == pytest.approx(400_000)


def test_t_sd_without_any_step_is_one_evaluation() -> None:
    lat = components(shadow_run(server=ServerWork(0.5, 10, 0.2, 10, 0)))
    assert lat.t_sd == pytest.approx(0.02)


def test_bounds_and_checks_by_hand() -> None:
    m = run_metrics(shadow_run(), PARAMS)
    # eq. 14: 8 / (8 * 0.08 + 8 * 0.1 + 0.05 + 0.3); eq. 15: 64 / (56 * 0.08 + max(0.64, 0.35))
    assert m.bounds.throughput_fps_min == pytest.approx(8 / 1.79)
    assert m.bounds.throughput_fps_max == pytest.approx(12.5)
    # eq. 8: 3.2 Mbit / (64 * 0.08 + 0.8 + 0.35); eq. 12: 3.2 Mbit / max(0.64, 0.35)
    assert m.bounds.traffic_mbps_min == pytest.approx(3.2 / 6.27)
    assert m.bounds.traffic_mbps_max == pytest.approx(5.0)
    assert m.fps_check.within and m.mbps_check.within
    slow = run_metrics(shadow_run(loop_seconds=40.0, waited_seconds=32.0), PARAMS)  # same t_si, 2.5 FPS
    assert not slow.fps_check.within and slow.fps_check.miss == pytest.approx(2.5 / (8 / 1.79) - 1)


def test_bound_check_miss_is_relative_to_the_nearer_bound() -> None:
    assert BoundCheck(2.0, 4.0, 8.0).miss == pytest.approx(-0.5)
    assert BoundCheck(10.0, 4.0, 8.0).miss == pytest.approx(0.25)
    assert BoundCheck(4.0, 4.0, 8.0).within and BoundCheck(4.0, 4.0, 8.0).miss == 0.0


def test_naive_runs_have_no_components_or_bounds() -> None:
    naive = shadow_run(variant="naive-raw", key_frames=100, frames_sent=100, update_roundtrip_seconds=[],
                       server=ServerWork(0.5, 100, 0.0, 0, 0), handshake_bytes_received=300)
    m = run_metrics(naive, PARAMS)
    assert m.latencies is None and m.bounds is None and m.fps_check is None
    assert m.key_frame_ratio == 1.0


def test_a_run_without_frames_is_an_error() -> None:
    with pytest.raises(ValueError, match="no frames"):
        run_metrics(shadow_run(frames=0), PARAMS)


def test_retention_is_the_fps_ratio_low_over_high() -> None:
    high = run_metrics(shadow_run(), PARAMS)
    low = run_metrics(replace(shadow_run(bandwidth_mbps=8.0), loop_seconds=12.5), PARAMS)
    metrics = {("s", 80.0, "shadowtutor"): high, ("s", 8.0, "shadowtutor"): low}
    assert retention(metrics, "s", "shadowtutor", 8.0, 80.0) == pytest.approx(0.8)
    assert retention(metrics, "s", "naive-raw", 8.0, 80.0) is None
    assert mean_or_none([0.8, None, 0.4]) == pytest.approx(0.6) and mean_or_none([None]) is None
