"""Algorithm 2: the next key-frame stride from the student's metric."""

from __future__ import annotations

from shadowtutor.algorithms.params import AlgorithmParams


def stride_ratio(metric: float, threshold: float) -> float:
    """Piecewise linear through (0, 0), (THRESHOLD, 1) and (1, 2)."""
    if metric < threshold:
        return metric / threshold
    return (metric - 2.0 * threshold + 1.0) / (1.0 - threshold)


def next_stride(
    stride: int, metric: float, params: AlgorithmParams, threshold: float | None = None
) -> int:
    """``clamp(floor(ratio * stride), MIN_STRIDE, MAX_STRIDE)`` (floored as in the authors' code),
    the ratio taken against ``threshold`` (the session's current THRESHOLD) or, when None,
    ``params.threshold``."""
    proposed = int(
        stride_ratio(metric, params.threshold if threshold is None else threshold) * stride
    )
    return min(params.max_stride, max(params.min_stride, proposed))
