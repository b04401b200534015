"""Summarising a load run: totals, per-edge turnarounds, memory, and the problems that fail it."""

from __future__ import annotations

from typing import Any

import pytest

from shadowtutor_lab.stress.load_edge import CameraResult, KeyFrameRecord
from shadowtutor_lab.stress.load_memory import MemorySample
from shadowtutor_lab.stress.load_results import MIB, summarise

DURATION = 8.0


def camera(edge: int, turnarounds: list[float | None], **fields: Any) -> CameraResult:
    records = [KeyFrameRecord(edge, 8 * i, float(i), t, 0.0) for i, t in enumerate(turnarounds)]
    return CameraResult(f"load-{edge:03d}", records, sessions=1, bytes_sent=1000, bytes_received=5000, **fields)


def samples(growth_mib: float = 0.0, sessions_after: int = 0) -> list[MemorySample]:
    """Idle at t = -3, connecting from -1, the load from 0 to 8 (rising by ``growth_mib``), closed after."""
    rows = [MemorySample(-3.0, 500 * MIB, 500 * MIB, 0), MemorySample(-0.5, 600 * MIB, 600 * MIB, 2)]
    rows += [MemorySample(float(t), round((700 + growth_mib * t / DURATION) * MIB), None, 2) for t in range(9)]
    rows.append(MemorySample(10.0, 690 * MIB, 690 * MIB, sessions_after))
    return rows


def test_totals_and_turnarounds_overall_and_per_edge() -> None:
    cameras = [camera(0, [0.1, 0.2, 0.3]), camera(1, [0.4, None], errors={"teacher_failed": 1})]
    results = summarise(cameras, samples(), DURATION, connect_at=-1.0)
    totals = results["totals"]
    assert (totals["sent"], totals["answered"], totals["unanswered"]) == (5, 4, 1)
    assert totals["errors"] == {"teacher_failed": 1}
    assert totals["rate_per_s"] == pytest.approx(5 / DURATION)
    assert totals["bytes_received"] == 10000
    assert results["turnaround"]["count"] == 4 and results["turnaround"]["max_ms"] == pytest.approx(400)
    first, second = results["edges"]
    assert first["turnaround"]["p50_ms"] == pytest.approx(200) and first["unanswered"] == 0
    assert second["answered"] == 1 and second["errors"] == {"teacher_failed": 1}
    assert results["key_frames"]["rows"][-1] == [1, 8, 1.0, None, 0.0, None]
    assert results["key_frames"]["rows"][0][3] == pytest.approx(100.0)


def test_memory_idle_peak_after_growth_and_sessions() -> None:
    memory = summarise([camera(0, [0.1])], samples(growth_mib=80), DURATION, connect_at=-1.0)["memory"]
    assert memory["source"] == "rss_bytes"
    assert memory["idle_bytes"] == 500 * MIB  # before the cameras connected, not while they did
    assert memory["peak_bytes"] == 780 * MIB and memory["after_bytes"] == 690 * MIB
    assert memory["growth"]["growth_bytes"] == pytest.approx(60 * MIB)  # means of t in [0, 2] and [6, 8]: 710, 770
    assert (memory["sessions_max"], memory["sessions_after"]) == (2, 0)
    assert len(memory["samples"]) == 12


def test_memory_falls_back_to_the_servers_metric_without_a_local_pid() -> None:
    remote = [MemorySample(float(t), None, (100 + t) * MIB, 1) for t in range(9)]
    memory = summarise([camera(0, [0.1])], remote, DURATION)["memory"]
    assert memory["source"] == "metrics_rss_bytes"
    assert memory["growth"]["growth_bytes"] == pytest.approx(6 * MIB)


def test_a_clean_run_has_no_problems() -> None:
    assert summarise([camera(0, [0.1, 0.2]), camera(1, [0.3])], samples(), DURATION)["problems"] == []


@pytest.mark.parametrize("cameras, memory, kwargs, expected", [
    ([camera(0, [0.1], errors={"bad_frame": 2})], samples(), {}, "2 ERROR messages from the server"),
    ([camera(0, [0.1, None])], samples(), {}, "1 of 2 key frames got no answer"),
    ([camera(0, [0.1], disconnects=1)], samples(), {}, "1 unexpected disconnects"),
    ([camera(0, [0.1], resyncs=1, rejected_updates=1)], samples(), {}, "edge and server disagreed on versions"),
    ([camera(0, [0.1], full_answers=1)], samples(), {}, "1 full updates answering key frames"),
    ([camera(0, [0.1], failure="refused")], samples(), {}, "load-000 stopped early: refused"),
    ([camera(0, [0.1])], samples(sessions_after=1), {}, "still counted 1 sessions"),
    ([camera(0, [0.1])], samples(growth_mib=80), {"max_growth_mib": 50}, "grew 60.0 MiB"),
    ([camera(0, [0.1])], samples(), {"log_problems": ["Traceback (most recent call last):"]}, "server log: Trace"),
], ids=["errors", "unanswered", "disconnects", "resyncs", "full-answers", "failure", "sessions", "growth", "log"])
def test_each_problem_is_reported(cameras: list[CameraResult], memory: list[MemorySample], kwargs: dict[str, Any],
                                  expected: str) -> None:
    problems = summarise(cameras, memory, DURATION, **kwargs)["problems"]
    assert len(problems) == 1 and expected in problems[0], problems


def test_growth_within_the_limit_is_no_problem() -> None:
    assert summarise([camera(0, [0.1])], samples(growth_mib=80), DURATION, max_growth_mib=100)["problems"] == []
