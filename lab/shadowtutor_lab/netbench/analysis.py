"""What the report shows, derived from a results file: per-run rates, the paper's Table 1 components,
their bounds (eqs. 8, 12, 14, 15 via :mod:`shadowtutor.algorithms.bounds`), the bound checks, and
the ratios of throughput at a low and a high bandwidth.

Definitions, for one run (MB = 10^6 bytes, Mbps = 10^6 bit/s):

- FPS = frames / the agent's frame-loop seconds (start-up and the WELCOME's weights left out).
- payload = WebSocket bytes in both directions minus the handshake (HELLO, WELCOME).
- Mbps = payload * 8 / loop seconds (eq. 4's k * s_net / t_tot); bytes per frame = payload / frames.
- s_net = payload / key frames sent: one key frame and its update (or its label map, naive).
- t_si = (loop seconds - seconds blocked on the network) / frames: the edge's own time per frame
  (decoding, student inference, encoding key frames, installing updates).
- t_ti = the server's teacher latency per key frame (queue wait and labelling).
- t_sd = Algorithm 1's time / its optimisation steps (its evaluations included); when no key frame
  needed a step, the time of Algorithm 1's single evaluation.
- t_net = mean update round trip - mean server time per key frame (teacher + Algorithm 1).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from statistics import fmean

from shadowtutor.algorithms.bounds import Bounds, Latencies, compute_bounds
from shadowtutor.algorithms.params import AlgorithmParams
from shadowtutor_lab.netbench.results import Results, RunRecord


@dataclass(frozen=True)
class BoundCheck:
    value: float
    low: float
    high: float

    @property
    def within(self) -> bool:
        return self.low <= self.value <= self.high

    @property
    def miss(self) -> float:
        """0 within the bounds; else the relative distance to the nearer bound (< 0 below, > 0 above)."""
        if self.value < self.low:
            return (self.value - self.low) / self.low
        if self.value > self.high:
            return (self.value - self.high) / self.high
        return 0.0


@dataclass(frozen=True)
class RunMetrics:
    record: RunRecord
    fps: float
    mbps: float
    payload_bytes: int
    bytes_per_frame: float
    up_per_frame: float  # payload bytes edge -> server per frame processed
    down_per_frame: float
    up_per_key_frame: float  # bytes edge -> server per key frame sent
    down_per_key_frame: float
    key_frame_ratio: float
    wire_bytes_per_frame: float  # veth bytes (TCP/IP, handshake, start-up included) per frame
    startup_seconds: float  # the agent's run outside the frame loop
    latencies: Latencies | None  # ShadowTutor runs with answered key frames only
    bounds: Bounds | None
    fps_check: BoundCheck | None
    mbps_check: BoundCheck | None

    @property
    def s_net(self) -> float:
        return self.up_per_key_frame + self.down_per_key_frame


def payload_bytes(r: RunRecord) -> int:
    return r.bytes_sent + r.bytes_received - r.handshake_bytes_sent - r.handshake_bytes_received


def components(r: RunRecord) -> Latencies | None:
    """The paper's Table 1 latencies and s_net for a distillation run; None without answered key frames."""
    work = r.server
    if not (r.frames_sent and r.update_roundtrip_seconds and work.distill_count and work.teacher_count):
        return None
    t_ti = work.teacher_seconds / work.teacher_count
    t_sd = work.distill_seconds / (work.steps or work.distill_count)
    server_time = t_ti + work.distill_seconds / work.distill_count
    t_net = max(0.0, fmean(r.update_roundtrip_seconds) - server_time)
    t_si = max(r.loop_seconds - r.waited_seconds, 1e-9) / r.frames
    return Latencies(t_si=t_si, t_sd=t_sd, t_ti=t_ti, t_net=t_net, s_net_bytes=payload_bytes(r) / r.frames_sent)


def run_metrics(r: RunRecord, params: AlgorithmParams) -> RunMetrics:
    if r.frames <= 0 or r.loop_seconds <= 0:
        raise ValueError(f"run {r.key} processed no frames")
    payload = payload_bytes(r)
    fps, mbps = r.frames / r.loop_seconds, payload * 8 / 1e6 / r.loop_seconds
    sent = max(r.frames_sent, 1)
    latencies = components(r)
    bounds = fps_check = mbps_check = None
    if latencies is not None:
        bounds = compute_bounds(latencies, params.min_stride, params.max_stride, params.max_updates)
        fps_check = BoundCheck(fps, bounds.throughput_fps_min, bounds.throughput_fps_max)
        mbps_check = BoundCheck(mbps, bounds.traffic_mbps_min, bounds.traffic_mbps_max)
    return RunMetrics(
        record=r, fps=fps, mbps=mbps, payload_bytes=payload, bytes_per_frame=payload / r.frames,
        up_per_frame=(r.bytes_sent - r.handshake_bytes_sent) / r.frames,
        down_per_frame=(r.bytes_received - r.handshake_bytes_received) / r.frames,
        up_per_key_frame=(r.bytes_sent - r.handshake_bytes_sent) / sent,
        down_per_key_frame=(r.bytes_received - r.handshake_bytes_received) / sent,
        key_frame_ratio=r.key_frames / r.frames,
        wire_bytes_per_frame=(r.wire_bytes_up + r.wire_bytes_down) / r.frames,
        startup_seconds=max(0.0, r.wall_seconds - r.loop_seconds),
        latencies=latencies, bounds=bounds, fps_check=fps_check, mbps_check=mbps_check,
    )


def params_of(results: Results) -> AlgorithmParams:
    return AlgorithmParams.from_dict(results.meta.get("algorithm_params", {}))


def all_metrics(results: Results) -> dict[tuple[str, float, str], RunMetrics]:
    params = params_of(results)
    return {r.key: run_metrics(r, params) for r in results.runs}


def retention(
    metrics: dict[tuple[str, float, str], RunMetrics], scene: str, variant: str, low: float, high: float
) -> float | None:
    """FPS at ``low`` Mbps over FPS at ``high`` Mbps for one scene and variant; None if either is missing."""
    at_low, at_high = metrics.get((scene, low, variant)), metrics.get((scene, high, variant))
    if at_low is None or at_high is None:
        return None
    return at_low.fps / at_high.fps


def mean_or_none(values: Sequence[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return fmean(present) if present else None
