"""The server bench's generated scene, its profile arithmetic and its report."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch

from shadowtutor.classes import LVS_CLASSES, background_index
from shadowtutor_lab.evaluation import server_bench
from shadowtutor_lab.evaluation.server_bench import (
    BenchPoint,
    SyntheticScene,
    SyntheticTeacher,
    markdown_report,
    server_profile,
    window_rate,
)

INFO = {"device": "test device", "torch": "x", "teacher": "t", "threshold": 0.999, "max_updates": 8}


def _point(stage: str, sessions: int, rate: float, steps: float | None = 8.0) -> BenchPoint:
    return BenchPoint(size=(640, 360), sessions=sessions, stage=stage, engine="batched", key_frames=10,
                      seconds=1.0, key_frames_per_s=rate, p50_ms=1.0, p95_ms=2.0, mean_steps=steps, gpu_busy=0.5)


def test_the_scene_has_exact_labels_of_the_students_classes() -> None:
    scene = SyntheticScene(LVS_CLASSES)
    scene.add_size((96, 64))
    frames, labels = scene.frames[(96, 64)], scene.labels[(96, 64)]
    assert len(frames) == len(labels) == 8
    assert frames[0].shape == (64, 96, 3) and labels[0].shape == (64, 96)
    background = background_index(LVS_CLASSES)
    assert (labels[0] != background).any() and (labels[0] == background).any()
    assert not np.array_equal(labels[0], labels[7])  # the objects move
    teacher = SyntheticTeacher(scene)
    assert teacher.label(frames[3], 11) is labels[3]


def test_the_profile_takes_each_stages_best_point() -> None:
    points = [_point("teacher", 16, 40.0), _point("teacher", 64, 50.0, None), _point("distill", 64, 100.0),
              _point("both", 16, 20.0, 6.0), _point("both", 64, 25.0, 7.5)]
    profile = server_profile(points, INFO, "cmd", "2026-11-26")
    size = profile["sizes"]["640x360"]
    assert size == {"teacher_ms": pytest.approx(20.0), "step_ms": pytest.approx(1.25),
                    "key_frame_ms": pytest.approx(40.0), "steps": 7.5, "sessions": 64}
    assert profile["device"] == "test device" and profile["schema"] == "shadowtutor.server_profile/1"


def test_a_profile_needs_all_three_stages() -> None:
    with pytest.raises(ValueError, match="teacher, distill and both"):
        server_profile([_point("distill", 64, 100.0)], INFO, "cmd", "2026-11-26")


def test_the_report_names_the_device_and_the_command() -> None:
    text = markdown_report([_point("distill", 64, 100.0)], INFO, "shadowtutor bench server --x")
    assert "**test device**" in text and "`shadowtutor bench server --x`" in text
    assert "| batched | 640x360 | distill | 64 | 100.0 | 1 | 2 | 8.00 | 50% |" in text


class _SlowTeacherRuntime:
    """A server runtime whose teacher takes ``delay_s`` per key frame (nothing else is used by the teacher stage)."""

    def __init__(self, delay_s: float) -> None:
        self.delay_s = delay_s
        self.teacher_queue = self

    async def label(self, frame: np.ndarray, frame_index: int) -> Any:
        await asyncio.sleep(self.delay_s)
        return SimpleNamespace(labels=np.zeros(frame.shape[:2], np.uint8))


def _measure_teacher(delay_s: float, sessions: int, seconds: float) -> Any:
    scene = SyntheticScene(LVS_CLASSES)
    scene.add_size((32, 24))
    return asyncio.run(server_bench._measure(
        _SlowTeacherRuntime(delay_s), scene, (32, 24), sessions, "teacher", 0.01, seconds, torch.device("cpu")))


def test_the_window_lasts_until_every_session_has_two_answers() -> None:
    """Key frames that take 3x the window asked for: the window waits for two of each session's (at ~0.15 and
    ~0.3 s) rather than counting none."""
    window = _measure_teacher(0.15, 3, 0.05)
    assert [len(times) for times in window.answer_times] == [2, 2, 2] and 0.25 < window.seconds < 0.5
    assert window_rate(window.answer_times, window.seconds) == pytest.approx(3 / 0.15, rel=0.15)


def test_the_window_asked_for_when_it_is_enough() -> None:
    window = _measure_teacher(0.01, 2, 0.2)
    assert window.answered > 4 and 0.2 <= window.seconds < 0.4
    assert window_rate(window.answer_times, window.seconds) == pytest.approx(2 / 0.01, rel=0.5)


def test_the_window_ends_at_its_cap() -> None:
    window = _measure_teacher(1.0, 2, 0.02)
    assert window.answered == 0 and window.seconds == pytest.approx(server_bench.WINDOW_CAP * 0.02, abs=0.05)
    assert window_rate(window.answer_times, window.seconds) == 0


def test_the_rate_of_batches_does_not_depend_on_the_windows_phase() -> None:
    """Four sessions answered together every 2 s, in a window of 5 s that holds three batches (at 0.9, 2.9
    and 4.9 s): 2 key frames/s, where counting over the window's length gives 12 / 5."""
    times = [[0.9, 2.9, 4.9]] * 4
    assert window_rate(times, 5.0) == pytest.approx(2.0)
    assert window_rate([[0.9, 2.9, 4.9], [2.9]], 5.0) == pytest.approx(4 / 5.0)  # a session answered once
