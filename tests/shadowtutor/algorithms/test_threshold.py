from __future__ import annotations

import pytest

from shadowtutor.algorithms.params import AlgorithmParams
from shadowtutor.algorithms.stride import next_stride
from shadowtutor.algorithms.threshold import ATTAINABLE_RATIO, WINDOW, StrideThreshold

AUTO = AlgorithmParams(threshold_policy="auto")


def _observed(params: AlgorithmParams, metrics: list[float]) -> StrideThreshold:
    threshold = StrideThreshold(params)
    for metric in metrics:
        threshold.observe(metric)
    return threshold


def test_the_paper_ratio_is_its_threshold_over_the_best_miou_then() -> None:
    assert ATTAINABLE_RATIO == pytest.approx(0.9467, abs=1e-4)
    assert WINDOW == 8


def test_fixed_policy_is_the_paper_whatever_is_observed() -> None:
    assert _observed(AlgorithmParams(threshold=0.7), [0.1] * 20).current == 0.7


def test_auto_starts_at_the_paper_threshold_until_a_window_is_in() -> None:
    threshold = _observed(AUTO, [0.6] * (WINDOW - 1))
    assert threshold.current == 0.8
    threshold.observe(0.6)
    assert threshold.current == pytest.approx(0.6 * 0.8 / 0.845)


@pytest.mark.parametrize(
    ("metrics", "expected"),
    [
        ([0.70, 0.72, 0.74, 0.76, 0.78, 0.80, 0.82, 0.10], 0.75 * 0.8 / 0.845),  # median of 8 (0.74+0.76)/2
        ([0.5] * 8, 0.5 * 0.8 / 0.845),
        ([0.95] * 8, 0.8),  # a student above the paper's level: the paper's threshold, never more
        ([0.0] * 8, 1e-3),  # stays inside (0, 1)
    ],
)
def test_auto_is_the_paper_ratio_of_the_median_capped_at_the_threshold(metrics: list[float], expected: float) -> None:
    assert _observed(AUTO, metrics).current == pytest.approx(expected)


def test_auto_follows_the_last_window_only() -> None:
    threshold = _observed(AUTO, [0.9] * WINDOW + [0.6] * WINDOW)  # the camera got harder
    assert threshold.current == pytest.approx(0.6 * ATTAINABLE_RATIO)


def test_auto_caps_at_a_lower_starting_threshold() -> None:
    assert _observed(AlgorithmParams(threshold=0.6, threshold_policy="auto"), [0.9] * 8).current == 0.6


def test_a_peers_metric_outside_0_1_is_clamped_and_nan_ignored() -> None:
    threshold = _observed(AUTO, [1.5, -0.2, float("nan")] + [0.5] * 6)
    assert len(threshold.recent) == 8 and max(threshold.recent) == 1.0 and min(threshold.recent) == 0.0
    assert threshold.current == pytest.approx(0.5 * ATTAINABLE_RATIO)


def test_a_student_at_its_usual_level_grows_the_stride_under_auto_only() -> None:
    # A real teacher: the student reaches 0.75 after every key frame, under the paper's 0.8.
    fixed, auto = StrideThreshold(AlgorithmParams()), _observed(AUTO, [0.75] * 8)
    assert next_stride(8, 0.75, AUTO, fixed.current) == 8  # the paper's rule: stuck at MIN_STRIDE
    assert auto.current == pytest.approx(0.71006, abs=1e-4)
    # ratio (0.75 - 2 T + 1) / (1 - T) = 1.1378: 8 -> 9 -> 10 -> 11 -> 12 -> 13 -> 14 -> 15 -> 17 (floored)
    strides = [8]
    for _ in range(8):
        strides.append(next_stride(strides[-1], 0.75, AUTO, auto.current))
    assert strides == [8, 9, 10, 11, 12, 13, 14, 15, 17]


def test_a_student_well_under_its_usual_level_shrinks_the_stride() -> None:
    auto = _observed(AUTO, [0.75] * 8)
    assert next_stride(32, 0.5, AUTO, auto.current) == 22  # 0.5 / 0.71006 * 32 = 22.5, floored
