"""Statistics of a load run: turnaround percentiles and server memory growth."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np

PERCENTILES = (50, 95, 99)


@dataclass(frozen=True)
class Turnaround:
    """Key-frame turnarounds in milliseconds; all ``None`` when there were none."""

    count: int
    mean_ms: float | None
    p50_ms: float | None
    p95_ms: float | None
    p99_ms: float | None
    max_ms: float | None

    def to_dict(self) -> dict[str, float | int | None]:
        return asdict(self)


def turnaround(seconds: Sequence[float]) -> Turnaround:
    """Mean, p50/p95/p99 (linear interpolation between ranks, numpy's default) and max, in ms."""
    if len(seconds) == 0:
        return Turnaround(0, None, None, None, None, None)
    ms = np.asarray(seconds, dtype=np.float64) * 1000.0
    if not np.all(np.isfinite(ms)) or np.any(ms < 0):
        raise ValueError("turnarounds must be finite and non-negative")
    p50, p95, p99 = (float(v) for v in np.percentile(ms, PERCENTILES))
    return Turnaround(len(ms), float(ms.mean()), p50, p95, p99, float(ms.max()))


@dataclass(frozen=True)
class MemoryGrowth:
    """Mean memory over the first and the last quarter of a window, and the difference (bytes)."""

    first_quarter_bytes: float
    last_quarter_bytes: float
    first_samples: int
    last_samples: int

    @property
    def growth_bytes(self) -> float:
        return self.last_quarter_bytes - self.first_quarter_bytes

    @property
    def growth_fraction(self) -> float:
        return self.growth_bytes / self.first_quarter_bytes if self.first_quarter_bytes else 0.0

    def to_dict(self) -> dict[str, float | int]:
        return {**asdict(self), "growth_bytes": self.growth_bytes, "growth_fraction": self.growth_fraction}


def memory_growth(times: Sequence[float], values: Sequence[float], start: float, end: float) -> MemoryGrowth | None:
    """Growth of ``values`` (sampled at ``times``) from the first to the last quarter of ``[start, end]``.

    ``None`` when either quarter holds no sample (a window too short for the sampling interval).
    """
    if len(times) != len(values):
        raise ValueError(f"{len(times)} times but {len(values)} values")
    if end <= start:
        raise ValueError(f"empty window [{start}, {end}]")
    quarter = (end - start) / 4.0
    first = [v for t, v in zip(times, values, strict=True) if start <= t <= start + quarter]
    last = [v for t, v in zip(times, values, strict=True) if end - quarter <= t <= end]
    if not first or not last:
        return None
    return MemoryGrowth(float(np.mean(first)), float(np.mean(last)), len(first), len(last))
