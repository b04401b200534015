from __future__ import annotations

import numpy as np
import pytest

from shadowtutor.acceleration.regions.decision import default_decision_network_path, load_decision_network
from shadowtutor_lab.regions import bench
from tests.support.motion import panning


def threshold_segment(image: np.ndarray) -> np.ndarray:
    return (image.mean(axis=2) > 128).astype(np.uint8)


def test_run_clip_scores_every_method_against_truth_and_student() -> None:
    network, _ = load_decision_network(default_decision_network_path())
    config = bench.RegionBenchConfig(decisions=((0.0, 3),), budgets=((0.5, 3),), intervals=(2, 4), warmup=1)
    frames = panning(9)
    truth = [threshold_segment(f) for f in frames]
    clip = bench.run_clip(frames, truth, threshold_segment, network, 2, config)
    assert set(clip) == {"student", "dn@0/age3", "budget@0.5/age3", "fixed@2", "fixed@4"}
    assert clip["student"]["miou"] == 1.0 and clip["student"]["agreement"] == 1.0
    assert all(row["frames"] == 8 for row in clip.values())
    assert clip["fixed@2"]["flow_fraction"] == pytest.approx(4 / 9)
    assert clip["dn@0/age3"]["flow_fraction"] == pytest.approx(6 / 9)  # segmented at 0, 4, 8
    assert clip["budget@0.5/age3"]["flow_fraction"] > 0  # a generous budget warps too
    assert 0.8 < clip["fixed@4"]["miou"] < 1.0


def test_summary_speedups_and_interpolated_baseline() -> None:
    clip = {"student": {"seconds": 2.0, "frames": 10, "miou": 0.5, "agreement": 1.0, "flow_fraction": 0.0},
            "fixed@2": {"seconds": 1.0, "frames": 10, "miou": 0.48, "agreement": 0.9, "flow_fraction": 0.5},
            "fixed@4": {"seconds": 0.5, "frames": 10, "miou": 0.44, "agreement": 0.8, "flow_fraction": 0.75},
            "dn@0.9/age4": {"seconds": 2 / 3, "frames": 10, "miou": 0.47, "agreement": 0.85, "flow_fraction": 0.7}}
    summary = bench.summarise([clip, clip])
    assert summary["fixed@2"]["speedup"] == pytest.approx(2.0)
    assert bench.fixed_interval_at(summary, 3.0) == pytest.approx(0.46)
    assert bench.fixed_interval_at(summary, 5.0) is None  # no extrapolation
    assert bench.fixed_interval_at(summary, 0.7, along="flow_fraction") == pytest.approx(0.448)
    lines = bench.acceptance(summary)
    assert any("dn@0.9/age4: 3.00x at 3.00 points lost: meets the target; against the fixed interval" in line
               and "+1.00 points (better)" in line
               and "at the same warped fraction: +2.20 points (better)" in line for line in lines)
    assert "| fixed@4 | 44.00 | 6.00 | 20.0 | 4.00x | 75 |" in "\n".join(bench.group_table(summary))
    assert "| 46.00 | 44.80 |" in "\n".join(bench.group_table(summary))


def test_spliced_clip_takes_shots_in_turn_from_its_sources() -> None:
    sources = [[(s, t) for t in range(50)] for s in range(3)]
    clip = list(bench.spliced(sources, 50, seed=1, shortest=5, longest=9))
    assert [t for _, t in clip] == list(range(50))  # frame t of the clip is frame t of its source
    shots = [s for i, (s, _) in enumerate(clip) if i == 0 or s != clip[i - 1][0]]
    assert shots[:4] == [0, 1, 2, 0] and len(shots) >= 50 // 9
    lengths = np.diff([i for i, (s, _) in enumerate(clip) if i == 0 or s != clip[i - 1][0]])
    assert 5 <= lengths.min() and lengths.max() <= 9
    assert list(bench.spliced(sources, 50, seed=1, shortest=5, longest=9)) == clip  # deterministic
