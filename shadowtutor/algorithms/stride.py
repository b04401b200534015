"""Algorithm 2: the next key-frame stride from the student's metric."""

from __future__ import annotations

from shadowtutor.algorithms.params import AlgorithmParams


def stride_ratio(metric: float, threshold: float) -> float:
    """Piecewise linear through (0, 0), (THRESHOLD, 1) and (1, 2)."""
    if metric < threshold:
        return metric / threshold
    return (metric - 2.0 * threshold + 1.0) / (1.0 - threshold)


def next_stride(
    stride: int,
    metric: float,
    params: AlgorithmParams,
    threshold: float | None = None,
    bounds: tuple[int, int] | None = None,
) -> int:
    """``clamp(floor(ratio * stride), low, high)`` (floored as in the authors' code), the ratio
    taken against ``threshold`` (the session's current THRESHOLD) or, when None,
    ``params.threshold``; ``bounds`` ``(low, high)`` in frames, None: ``(MIN_STRIDE,
    MAX_STRIDE)`` (:meth:`AlgorithmParams.stride_bounds` gives them for a source's rate)."""
    low, high = (params.min_stride, params.max_stride) if bounds is None else bounds
    proposed = int(
        stride_ratio(metric, params.threshold if threshold is None else threshold) * stride
    )
    return min(high, max(low, proposed))
