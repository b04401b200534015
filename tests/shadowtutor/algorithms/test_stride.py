from __future__ import annotations

import pytest

from shadowtutor.algorithms.params import AlgorithmParams
from shadowtutor.algorithms.stride import next_stride, stride_ratio

PAPER = AlgorithmParams()  # THRESHOLD 0.8, MIN_STRIDE 8, MAX_STRIDE 64


@pytest.mark.parametrize(
    ("metric", "ratio"),
    [(0.0, 0.0), (0.4, 0.5), (0.8, 1.0), (0.9, 1.5), (1.0, 2.0)],
)
def test_ratio_breakpoints_of_algorithm_2(metric: float, ratio: float) -> None:
    assert stride_ratio(metric, 0.8) == pytest.approx(ratio)


@pytest.mark.parametrize(
    ("stride", "metric", "expected"),
    [
        (16, 0.8, 16),  # at THRESHOLD the stride holds
        (16, 0.4, 8),  # halved
        (16, 0.9, 24),  # x1.5
        (16, 1.0, 32),  # doubled
        (20, 0.7, 17),  # 0.875 * 20 = 17.5, floored
        (8, 0.0, 8),  # clamped to MIN_STRIDE
        (40, 1.0, 64),  # clamped to MAX_STRIDE
        (64, 0.79, 63),
    ],
)
def test_next_stride_hand_worked(stride: int, metric: float, expected: int) -> None:
    assert next_stride(stride, metric, PAPER) == expected


def test_params_reject_nonsense() -> None:
    with pytest.raises(ValueError):
        AlgorithmParams(min_stride=10, max_stride=5)
    with pytest.raises(ValueError):
        AlgorithmParams(threshold=1.0)
    with pytest.raises(ValueError):
        AlgorithmParams(mode="half")  # type: ignore[arg-type]
    assert AlgorithmParams.from_dict(PAPER.to_dict() | {"unknown": 1}) == PAPER


def test_next_stride_clamps_to_the_bounds_given() -> None:
    params = AlgorithmParams()
    assert next_stride(15, 1.0, params, bounds=(15, 240)) == 30
    assert next_stride(200, 1.0, params, bounds=(15, 240)) == 240
    assert next_stride(15, 0.1, params, bounds=(15, 240)) == 15
    # without bounds, the paper's MIN_STRIDE and MAX_STRIDE
    assert next_stride(40, 1.0, params) == 64
