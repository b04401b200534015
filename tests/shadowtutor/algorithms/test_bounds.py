from __future__ import annotations

import pytest

from shadowtutor.algorithms.bounds import Latencies, advise_max_updates, compute_bounds
from shadowtutor_cli import main

# Section 5.3 / 6.2 of the paper: t_si .143, t_sd .013, t_ti .044, t_net .303 s, 3.032 MB per key frame.
PAPER = Latencies(t_si=0.143, t_sd=0.013, t_ti=0.044, t_net=0.303, s_net_bytes=3.032e6)


def test_bounds_reproduce_the_paper() -> None:
    bounds = compute_bounds(PAPER, min_stride=8, max_stride=64, max_updates=8)
    assert bounds.throughput_fps_max == pytest.approx(6.99, abs=0.005)  # eq. 15, section 5.3
    assert bounds.throughput_fps_min == pytest.approx(8 / 1.595)  # eq. 14
    assert bounds.traffic_mbps_min == pytest.approx(2.53, abs=0.005)  # eq. 8, section 6.2
    assert bounds.traffic_mbps_max == pytest.approx(21.2, abs=0.05)  # eq. 12


def test_concurrency_term_switches_to_network_when_it_dominates() -> None:
    slow_net = Latencies(t_si=0.01, t_sd=0.0, t_ti=0.1, t_net=1.0, s_net_bytes=1e6)
    bounds = compute_bounds(slow_net, min_stride=8, max_stride=64, max_updates=0)
    assert bounds.throughput_fps_max == pytest.approx(64 / (56 * 0.01 + 1.1))
    assert bounds.traffic_mbps_max == pytest.approx(8 / 1.1)


def test_advised_max_updates_is_the_papers_eight() -> None:
    assert advise_max_updates(PAPER, min_stride=8, min_fps=5.0) == 8
    assert advise_max_updates(PAPER, min_stride=8, min_fps=6.0) is None


def test_bounds_command_json(capsys: pytest.CaptureFixture[str]) -> None:
    import json

    code = main(["bounds", "--t-si", "0.143", "--t-sd", "0.013", "--t-ti", "0.044", "--t-net", "0.303",
                 "--s-net-mb", "3.032", "--min-stride", "8", "--max-stride", "64", "--max-updates", "8",
                 "--json", "--advise-max-updates", "--min-fps", "5"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0
    assert set(out) == {"throughput_fps_min", "throughput_fps_max", "traffic_mbps_min", "traffic_mbps_max",
                        "advised_max_updates"}
    assert out["advised_max_updates"] == 8


def test_bounds_command_rejects_bad_input(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["bounds", "--t-si", "0", "--t-sd", "0.013", "--t-ti", "0.044", "--t-net", "0.303",
                 "--s-net-mb", "3"])
    assert code == 2
    assert "t_si" in capsys.readouterr().err


@pytest.mark.parametrize("min_fps", ["0", "-5", "nan"])
def test_advice_needs_a_positive_fps_floor(min_fps: str, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["bounds", "--t-si", "0.143", "--t-sd", "0.013", "--t-ti", "0.044", "--t-net", "0.303",
                 "--s-net-mb", "3.032", "--advise-max-updates", "--min-fps", min_fps])
    assert code == 2
    assert "min_fps must be > 0" in capsys.readouterr().err
