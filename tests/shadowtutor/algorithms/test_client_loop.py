from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pytest

from shadowtutor.algorithms.client_loop import ClientLoop, FrameResult, UpdateOutcome
from shadowtutor.algorithms.params import AlgorithmParams


@dataclass
class FakePending:
    """A pending update that lands after ``delay`` polls; ``wait`` forces it (the paper's wait)."""

    outcome: UpdateOutcome[int] | None
    delay: int
    polls: int = 0
    waits: list[int] = field(default_factory=list)

    def done(self) -> bool:
        self.polls += 1
        return self.polls >= self.delay

    def wait(self, timeout: float | None) -> bool:
        self.waits.append(self.polls)
        self.delay = 0
        return True

    def result(self) -> UpdateOutcome[int] | None:
        return self.outcome


class FakeTransport:
    def __init__(self, metric: float, delay: int, fail: bool = False) -> None:
        self.metric, self.delay, self.fail = metric, delay, fail
        self.sent: list[int] = []
        self.pendings: list[FakePending] = []

    def submit(self, frame_index: int, frame: np.ndarray) -> FakePending:
        self.sent.append(frame_index)
        outcome = None if self.fail else UpdateOutcome(metric=self.metric, payload=frame_index)
        self.pendings.append(FakePending(outcome, self.delay))
        return self.pendings[-1]


class FakeRuntime:
    def __init__(self) -> None:
        self.applied: list[tuple[int, int]] = []  # (payload, frames inferred so far)
        self.inferred = 0

    def infer(self, frame: np.ndarray) -> np.ndarray:
        self.inferred += 1
        return np.zeros(frame.shape[:2], np.uint8)

    def apply(self, payload: int) -> None:
        self.applied.append((payload, self.inferred))


FRAME = np.zeros((2, 2, 3), np.uint8)


def _run(metric: float, delay: int, frames: int, fail: bool = False):
    runtime, transport = FakeRuntime(), FakeTransport(metric, delay, fail)
    loop = ClientLoop(AlgorithmParams(), runtime, transport)
    results = [loop.process(FRAME) for _ in range(frames)]
    return runtime, transport, results


def test_stride_grows_with_a_perfect_student() -> None:
    # metric 1.0 doubles the stride: 8 -> 16 -> 32 -> 64 -> 64 (Algorithm 2 with the paper's clamp)
    _, transport, results = _run(metric=1.0, delay=1, frames=200)
    assert transport.sent == [0, 16, 48, 112, 176]
    assert [r.stride for r in results if r.is_key_frame] == [16, 32, 64, 64, 64]  # stride after the update
    assert all(r.labels.shape == (2, 2) for r in results)


def test_p1_applies_the_update_right_after_the_key_frame() -> None:
    runtime, _, results = _run(metric=0.8, delay=1, frames=24)
    assert runtime.applied == [(0, 1), (8, 9), (16, 17)]
    assert all(r.waited_seconds == 0.0 or r.index % 8 == 7 for r in results)


def test_waits_exactly_at_min_stride_when_the_update_is_late() -> None:
    runtime, transport, _ = _run(metric=0.8, delay=100, frames=17)
    # polled after frames 0..6 (7 polls), then the wait at step MIN_STRIDE (after frame 7)
    assert transport.pendings[0].waits == [7]
    assert runtime.applied[0] == (0, 8)  # frames 0..7 ran with the old weights: P-8
    assert transport.sent == [0, 8, 16]


def test_failed_updates_keep_weights_and_stride() -> None:
    runtime, transport, results = _run(metric=1.0, delay=1, frames=30, fail=True)
    assert runtime.applied == []
    assert transport.sent == [0, 8, 16, 24]
    assert {r.stride for r in results} == {8}


def test_next_key_frame_waits_for_an_outstanding_update_when_the_wait_times_out() -> None:
    class NeverPending(FakePending):
        def wait(self, timeout: float | None) -> bool:
            self.waits.append(self.polls)
            return False

    class SlowTransport(FakeTransport):
        def submit(self, frame_index: int, frame: np.ndarray) -> FakePending:
            self.sent.append(frame_index)
            self.pendings.append(NeverPending(UpdateOutcome(metric=0.8, payload=frame_index), delay=20))
            return self.pendings[-1]

    runtime, transport = FakeRuntime(), SlowTransport(0.8, 20)
    loop = ClientLoop(AlgorithmParams(), runtime, transport, wait_timeout=0.01)
    for _ in range(30):
        loop.process(FRAME)
    assert transport.sent == [0, 20]  # no second key frame until the first update landed
    assert runtime.applied[0] == (0, 20)


class _ScoredTransport(FakeTransport):
    """Answers every key frame with metric 1.0 after distillation and 0.4 before it."""

    def submit(self, frame_index: int, frame: np.ndarray) -> FakePending:
        self.sent.append(frame_index)
        self.pendings.append(
            FakePending(UpdateOutcome(metric=1.0, payload=frame_index, steps=3, initial_metric=0.4), self.delay)
        )
        return self.pendings[-1]


def test_the_stride_follows_the_metric_after_distillation_by_default() -> None:
    loop = ClientLoop(AlgorithmParams(min_stride=4, max_stride=64), FakeRuntime(), _ScoredTransport(1.0, 1))
    strides = [loop.process(FRAME).stride for _ in range(13)]
    assert strides[0] == 8 and strides[8] == 16  # 1.0 after distillation doubles it: 4 -> 8 -> 16


def test_the_stride_can_follow_the_metric_before_distillation() -> None:
    # 0.4 before distillation (THRESHOLD 0.8) halves the stride: 16 -> 8 -> 4, clamped at MIN_STRIDE 4.
    params = AlgorithmParams(min_stride=4, max_stride=64, stride_metric="before")
    loop = ClientLoop(params, FakeRuntime(), _ScoredTransport(1.0, 1))
    loop.stride = loop.step = 16
    results = [loop.process(FRAME) for _ in range(13)]
    assert [r.index for r in results if r.is_key_frame] == [0, 8, 12]
    assert [r.stride for r in results if r.is_key_frame] == [8, 4, 4]
    assert [r.applied_metric for r in results if r.applied_metric is not None] == [1.0, 1.0, 1.0]


def test_without_an_initial_metric_the_stride_falls_back_to_the_metric_after() -> None:
    params = AlgorithmParams(min_stride=4, stride_metric="before")
    loop = ClientLoop(params, FakeRuntime(), FakeTransport(1.0, 1))  # outcomes carry no initial metric
    assert [loop.process(FRAME).stride for _ in range(2)][0] == 8


def test_retune_takes_a_new_sessions_parameters_and_keeps_the_stride_within_them() -> None:
    runtime, transport = FakeRuntime(), FakeTransport(1.0, 1)
    loop = ClientLoop(AlgorithmParams(), runtime, transport)
    for _ in range(60):
        loop.process(FRAME)
    assert loop.stride == 64
    loop.retune(AlgorithmParams(min_stride=4, max_stride=16))
    assert loop.stride == 16 and loop.params.min_stride == 4
    loop.retune(AlgorithmParams(min_stride=32, max_stride=64))
    assert loop.stride == 32


def test_each_resolved_key_frame_settles_its_wait_at_min_stride_once() -> None:
    """wait_settled marks one frame per key frame: where the update was applied in time (before
    MIN_STRIDE, no wait) or where the loop waited for it at MIN_STRIDE. Inference is timed per frame."""
    _, _, in_time = _run(metric=0.8, delay=1, frames=24)  # applied right after each key frame
    assert [r.index for r in in_time if r.wait_settled] == [0, 8, 16]
    assert all(r.waited_seconds == 0.0 for r in in_time)
    _, transport, late = _run(metric=0.8, delay=100, frames=24)  # only the wait at MIN_STRIDE brings it
    assert [r.index for r in late if r.wait_settled] == [7, 15, 23]
    assert [len(p.waits) for p in transport.pendings] == [1, 1, 1]
    assert all(r.inference_seconds >= 0.0 for r in late)


def test_auto_threshold_lets_the_stride_grow_once_a_window_of_key_frames_is_in() -> None:
    # Every update says 0.75 after distillation, under the paper's 0.8: the fixed policy stays at MIN_STRIDE 8;
    # auto strides against 0.8 for the first 8 key frames (frames 0..56), then against 0.75 * 0.8 / 0.845.
    fixed = ClientLoop(AlgorithmParams(), FakeRuntime(), FakeTransport(0.75, 1))
    auto = ClientLoop(AlgorithmParams(threshold_policy="auto"), FakeRuntime(), FakeTransport(0.75, 1))
    for _ in range(120):
        fixed.process(FRAME)
        auto.process(FRAME)
    assert fixed.transport.sent == list(range(0, 120, 8))
    assert auto.transport.sent == [0, 8, 16, 24, 32, 40, 48, 56, 64, 73, 83, 94, 106, 119]
    assert auto.state()["threshold"] == pytest.approx(0.75 * 0.8 / 0.845)


def test_retune_measures_the_new_session_afresh() -> None:
    loop = ClientLoop(AlgorithmParams(threshold_policy="auto"), FakeRuntime(), FakeTransport(0.75, 1))
    for _ in range(70):
        loop.process(FRAME)
    assert loop.state()["threshold"] < 0.8
    loop.retune(AlgorithmParams(threshold_policy="auto"))
    assert loop.state()["threshold"] == 0.8


def test_a_frame_result_is_built_field_by_field() -> None:
    with pytest.raises(TypeError):
        FrameResult(0, np.zeros((2, 2), np.uint8), True, None, None, None, None, 0.0)  # type: ignore[misc]


CLOCK = AlgorithmParams(key_frame_pacing="clock")


def _frame(value: int) -> np.ndarray:
    return np.full((36, 64, 3), value, np.uint8)


def test_with_the_source_rate_key_frames_are_paced_in_seconds() -> None:
    # 30 FPS, clock pacing: strides between 0.5 s (15 frames) and 8 s (240); a perfect student doubles
    transport = FakeTransport(1.0, 1)
    loop = ClientLoop(CLOCK, FakeRuntime(), transport, fps=30.0)
    for _ in range(200):
        loop.process(_frame(100))
    assert loop.bounds == (15, 240)
    assert transport.sent == [0, 30, 90]


def test_the_paper_pacing_and_an_unknown_rate_count_frames() -> None:
    for params, fps in ((AlgorithmParams(), 30.0), (CLOCK, None)):
        transport = FakeTransport(0.8, 1)
        loop = ClientLoop(params, FakeRuntime(), transport, fps=fps)
        results = [loop.process(_frame(100 if i < 12 else 200)) for i in range(24)]
        assert transport.sent == [0, 8, 16]
        assert not any(r.cut for r in results)


def test_a_cut_calls_a_key_frame_once_min_stride_frames_have_passed() -> None:
    # stride 15 at 30 FPS; the scene changes at frame 3 (before MIN_STRIDE 8) and at frame 45
    transport = FakeTransport(0.8, 1)
    loop = ClientLoop(CLOCK, FakeRuntime(), transport, fps=30.0)
    values = [40] * 3 + [220] * 42 + [40] * 15
    results = [loop.process(_frame(v)) for v in values]
    assert [r.index for r in results if r.cut] == [3, 45]
    assert transport.sent == [0, 8, 23, 38, 46]


def test_a_cut_waits_for_the_outstanding_update() -> None:
    class LatePending(FakePending):
        def wait(self, timeout: float | None) -> bool:
            return False

    class LateTransport(FakeTransport):
        def submit(self, frame_index: int, frame: np.ndarray) -> FakePending:
            self.sent.append(frame_index)
            self.pendings.append(LatePending(UpdateOutcome(metric=0.8, payload=frame_index), self.delay))
            return self.pendings[-1]

    # the first update lands at the 12th poll (frame 11): the cut at frame 9 goes out after it
    transport = LateTransport(0.8, 12)
    loop = ClientLoop(CLOCK, FakeRuntime(), transport, fps=30.0, wait_timeout=0.0)
    for value in [40] * 9 + [220] * 20:
        loop.process(_frame(value))
    assert transport.sent[:2] == [0, 12]
