"""The paper's analytic throughput and traffic model (section 4.4, eqs. 2-15).

Times are seconds; ``s_net_bytes`` is the data crossing the network for one key frame
(both directions). Traffic is reported in Mbps (10^6 bits per second).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(kw_only=True, frozen=True)
class Latencies:
    """The measured times and bytes that the paper's throughput and traffic bounds (eqs. 14-15)
    take, in seconds and bytes."""

    # student inference, one frame
    t_si: float
    # one student distillation step
    t_sd: float
    # teacher inference, one key frame
    t_ti: float
    # network latency of one key frame and its update
    t_net: float
    # bytes on the network for one key frame and its update
    s_net_bytes: float

    def __post_init__(self) -> None:
        for name, value in asdict(self).items():
            if value < 0:
                raise ValueError(f"{name} must be >= 0, got {value}")
        if self.t_si <= 0:
            raise ValueError("t_si must be > 0")


@dataclass(kw_only=True, frozen=True)
class Bounds:
    """The paper's lower and upper bounds of the edge's throughput (FPS) and its traffic (Mbps)."""

    throughput_fps_min: float
    throughput_fps_max: float
    traffic_mbps_min: float
    traffic_mbps_max: float

    def to_dict(self) -> dict[str, float]:
        return asdict(self)


def _mbps(size_bytes: float, seconds: float) -> float:
    return size_bytes * 8.0 / 1e6 / seconds


def throughput_lower(lat: Latencies, min_stride: int, max_updates: int) -> float:
    """Eq. 14: key frames every MIN_STRIDE, MAX_UPDATES steps each, no concurrency."""
    return min_stride / (min_stride * lat.t_si + max_updates * lat.t_sd + lat.t_ti + lat.t_net)


def throughput_upper(lat: Latencies, min_stride: int, max_stride: int) -> float:
    """Eq. 15: key frames every MAX_STRIDE, no distillation, full concurrency."""
    # eq. 11
    t_c = max(min_stride * lat.t_si, lat.t_net + lat.t_ti)
    return max_stride / ((max_stride - min_stride) * lat.t_si + t_c)


def traffic_lower(lat: Latencies, max_stride: int, max_updates: int) -> float:
    """Eq. 8, in Mbps."""
    return _mbps(
        lat.s_net_bytes, max_stride * lat.t_si + max_updates * lat.t_sd + lat.t_ti + lat.t_net
    )


def traffic_upper(lat: Latencies, min_stride: int) -> float:
    """Eq. 12, in Mbps."""
    return _mbps(lat.s_net_bytes, max(min_stride * lat.t_si, lat.t_net + lat.t_ti))


def compute_bounds(lat: Latencies, min_stride: int, max_stride: int, max_updates: int) -> Bounds:
    if not 1 <= min_stride <= max_stride:
        raise ValueError(f"need 1 <= min_stride <= max_stride, got {min_stride}, {max_stride}")
    if max_updates < 0:
        raise ValueError(f"max_updates must be >= 0, got {max_updates}")
    return Bounds(
        throughput_fps_min=throughput_lower(lat, min_stride, max_updates),
        throughput_fps_max=throughput_upper(lat, min_stride, max_stride),
        traffic_mbps_min=traffic_lower(lat, max_stride, max_updates),
        traffic_mbps_max=traffic_upper(lat, min_stride),
    )


def advise_max_updates(
    lat: Latencies, min_stride: int, min_fps: float, limit: int = 10_000
) -> int | None:
    """Largest MAX_UPDATES whose throughput lower bound stays >= ``min_fps`` (section 5.3).

    None when even zero updates miss ``min_fps``; ``limit`` when distillation is free.
    """
    if not min_fps > 0:
        raise ValueError(f"min_fps must be > 0, got {min_fps}")
    if throughput_lower(lat, min_stride, 0) < min_fps:
        return None
    if lat.t_sd == 0:
        return limit
    # eq. 14 >= F  <=>  max_updates <= (MIN_STRIDE / F - MIN_STRIDE t_si - t_ti - t_net) / t_sd
    best = int((min_stride / min_fps - min_stride * lat.t_si - lat.t_ti - lat.t_net) / lat.t_sd)
    best = max(0, min(best, limit))
    # float rounding
    while best > 0 and throughput_lower(lat, min_stride, best) < min_fps:
        best -= 1
    while best < limit and throughput_lower(lat, min_stride, best + 1) >= min_fps:
        best += 1
    return best
