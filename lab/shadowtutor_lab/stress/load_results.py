"""The results of a load run as one JSON-ready dict: totals, turnarounds, memory, and what went wrong."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from shadowtutor_lab.stress.load_edge import CameraResult, KeyFrameRecord
from shadowtutor_lab.stress.load_memory import MemorySample
from shadowtutor_lab.stress.load_stats import memory_growth, turnaround

MIB = 1024 * 1024


def _turnarounds(result: CameraResult) -> list[float]:
    return [r.turnaround for r in result.records if r.turnaround is not None]


def _mean_steps(records: Sequence[KeyFrameRecord]) -> float | None:
    steps = [r.steps for r in records if r.steps is not None]
    return sum(steps) / len(steps) if steps else None


def edge_summary(result: CameraResult, duration: float) -> dict[str, Any]:
    sent = len(result.records)
    answered = len(_turnarounds(result))
    return {
        "edge_id": result.edge_id,
        "sent": sent,
        "answered": answered,
        "unanswered": sent - answered,
        "rate_per_s": sent / duration if duration > 0 else 0.0,
        "turnaround": turnaround(_turnarounds(result)).to_dict(),
        "mean_steps": _mean_steps(result.records),
        "errors": dict(sorted(result.errors.items())),
        "disconnects": result.disconnects,
        "sessions": result.sessions,
        "resyncs": result.resyncs,
        "full_answers": result.full_answers,
        "rejected_updates": result.rejected_updates,
        "bytes_sent": result.bytes_sent,
        "bytes_received": result.bytes_received,
        "failure": result.failure,
    }


def memory_summary(samples: Sequence[MemorySample], duration: float, connect_at: float = 0.0) -> dict[str, Any]:
    """Samples, and the growth from the first to the last quarter of the load (``0 <= t <= duration``).

    The series judged is ``/proc`` RSS where the server is local, else the server's own metric.
    ``connect_at`` (<= 0): when the cameras began to connect; samples before it are the idle server.
    """
    source = "rss_bytes" if any(s.rss_bytes is not None for s in samples) else "metrics_rss_bytes"
    series = [(s.t, getattr(s, source)) for s in samples if getattr(s, source) is not None]
    during = [v for t, v in series if 0 <= t <= duration]
    before = [v for t, v in series if t < connect_at]
    after = [v for t, v in series if t > duration]
    growth = memory_growth([t for t, _ in series], [v for _, v in series], 0.0, duration) if duration > 0 else None
    sessions = [s.sessions for s in samples if s.sessions is not None]
    return {
        "source": source if series else None,
        "idle_bytes": before[-1] if before else None,  # the last sample before the cameras connected
        "peak_bytes": max(during) if during else None,
        "after_bytes": after[-1] if after else None,  # the last sample after the cameras closed
        "growth": growth.to_dict() if growth is not None else None,
        "sessions_max": max(sessions) if sessions else None,
        "sessions_after": next((s.sessions for s in reversed(samples) if s.sessions is not None), None),
        "samples": [s.to_dict() for s in samples],
    }


def problems(totals: dict[str, Any], memory: dict[str, Any], cameras: Sequence[CameraResult],
             log_problems: Sequence[str], max_growth_mib: float | None) -> list[str]:
    """What makes the run fail, in words (empty: the run passed)."""
    found = []
    if totals["errors"]:
        found.append(f"{sum(totals['errors'].values())} ERROR messages from the server: {totals['errors']}")
    if totals["unanswered"]:
        found.append(f"{totals['unanswered']} of {totals['sent']} key frames got no answer")
    if totals["disconnects"]:
        found.append(f"{totals['disconnects']} unexpected disconnects")
    versions = totals["resyncs"] + totals["full_answers"] + totals["rejected_updates"]
    if versions:
        found.append(f"edge and server disagreed on versions: {totals['resyncs']} resyncs, "
                     f"{totals['full_answers']} full updates answering key frames, "
                     f"{totals['rejected_updates']} updates refused")
    found += [f"{c.edge_id} stopped early: {c.failure}" for c in cameras if c.failure]
    if memory["sessions_after"]:
        found.append(f"the server still counted {memory['sessions_after']} sessions after every camera closed")
    growth = memory["growth"]
    if max_growth_mib is not None and growth is not None and growth["growth_bytes"] > max_growth_mib * MIB:
        found.append(f"server memory grew {growth['growth_bytes'] / MIB:.1f} MiB between the first and the last "
                     f"quarter (limit {max_growth_mib:g} MiB)")
    found += [f"server log: {line}" for line in log_problems]
    return found


def summarise(cameras: Sequence[CameraResult], samples: Sequence[MemorySample], duration: float,
              connect_at: float = 0.0, log_problems: Sequence[str] = (),
              max_growth_mib: float | None = None) -> dict[str, Any]:
    """Totals, overall and per-edge turnarounds, memory, every key frame, and the problems found."""
    edges = [edge_summary(c, duration) for c in cameras]
    errors: Counter[str] = Counter()
    for camera in cameras:
        errors.update(camera.errors)
    keys = ("sent", "answered", "unanswered", "disconnects", "resyncs", "full_answers", "rejected_updates",
            "bytes_sent", "bytes_received")
    totals: dict[str, Any] = {key: sum(e[key] for e in edges) for key in keys}
    totals["errors"] = dict(sorted(errors.items()))
    totals["rate_per_s"] = totals["sent"] / duration if duration > 0 else 0.0
    totals["mean_steps"] = _mean_steps([r for c in cameras for r in c.records])
    memory = memory_summary(samples, duration, connect_at)
    all_turnarounds = [t for c in cameras for t in _turnarounds(c)]
    return {
        "duration_s": duration,
        "connect_at_s": connect_at,
        "totals": totals,
        "turnaround": turnaround(all_turnarounds).to_dict(),
        "edges": edges,
        "memory": memory,
        "key_frames": {  # one row per key frame, in send order per edge
            "columns": ["edge", "frame_index", "sent_at_s", "turnaround_ms", "late_s", "steps"],
            "rows": [[r.edge, r.frame_index, r.sent_at, None if r.turnaround is None else round(r.turnaround * 1e3, 2),
                      r.late, r.steps] for c in cameras for r in c.records],
        },
        "problems": problems(totals, memory, cameras, log_problems, max_growth_mib),
    }
