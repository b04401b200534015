"""The byte budget's gate: key frames only while each direction stays within its rate."""

from __future__ import annotations

import numpy as np
import pytest

from shadowtutor.algorithms.client_loop import ClientLoop, UpdateOutcome
from shadowtutor.algorithms.link_budget import KeyFrameBudget, LinkBudget
from shadowtutor.algorithms.params import AlgorithmParams


class Link:
    """Cumulative byte counters that a test moves by hand."""

    def __init__(self) -> None:
        self.sent = 0
        self.received = 0

    def totals(self) -> tuple[int, int]:
        return self.sent, self.received


def test_a_budget_refuses_nonsense() -> None:
    with pytest.raises(ValueError, match="uplink"):
        LinkBudget(uplink_bps=0)
    with pytest.raises(ValueError, match="downlink"):
        LinkBudget(downlink_bps=float("nan"))
    with pytest.raises(ValueError, match="window"):
        LinkBudget(uplink_bps=1e5, window_seconds=0.5)
    with pytest.raises(ValueError, match="frame rate"):
        KeyFrameBudget(LinkBudget(uplink_bps=1e5), 0.0, Link().totals)
    assert not LinkBudget().active and LinkBudget(downlink_bps=1e3).active


def test_the_first_key_frames_go_out_before_any_cost_is_known() -> None:
    link = Link()
    gate = KeyFrameBudget(LinkBudget(uplink_bps=8.0, window_seconds=1.0), 10.0, link.totals)
    link.sent = 10_000
    assert gate.allows(0)
    gate.key_frame(0)
    assert gate.allows(1), "one key frame gives no span to cost the next one by"


def test_a_key_frame_waits_until_the_window_has_room() -> None:
    # 8 kbit/s over 10 s: 10,000 bytes a window; each key frame costs 3,000 bytes up
    link = Link()
    gate = KeyFrameBudget(LinkBudget(uplink_bps=8_000, window_seconds=10.0), 1.0, link.totals)
    sent_at = []
    for frame in range(60):
        if gate.allows(frame):
            gate.key_frame(frame)
            link.sent += 3_000
            sent_at.append(frame)
    window_bytes = [3_000 * sum(1 for t in sent_at if frame - 10 < t <= frame) for frame in range(60)]
    assert max(window_bytes) <= 10_000 + 3_000, "at most one key frame over the budget, from its first estimate"
    assert max(window_bytes[20:]) <= 10_000
    assert len(sent_at) >= 15, "the budget is used, not left idle: about 3 key frames per 10 s"
    assert gate.denied > 0


def test_each_direction_is_kept_and_the_other_left_free() -> None:
    link = Link()
    gate = KeyFrameBudget(LinkBudget(downlink_bps=8_000, window_seconds=10.0), 1.0, link.totals)
    sent = 0
    for frame in range(100):
        if gate.allows(frame):
            gate.key_frame(frame)
            link.sent += 50_000  # the uplink is not budgeted
            link.received += 4_000
            sent += 1
    # 10,000 bytes per 10 s and 4,000-byte updates: two whole updates fit a window
    assert 16 <= sent <= 21, sent
    up, down = gate.rates(99)
    assert down <= 8_000 * 1.2 and up > 8_000


def test_frames_out_of_order_are_an_error() -> None:
    gate = KeyFrameBudget(LinkBudget(uplink_bps=1e4), 30.0, Link().totals)
    gate.allows(10)
    with pytest.raises(ValueError, match="before"):
        gate.allows(9)


class Gate:
    def __init__(self, open_from: int) -> None:
        self.open_from = open_from
        self.asked: list[int] = []
        self.sent: list[int] = []

    def allows(self, frame_index: int) -> bool:
        self.asked.append(frame_index)
        return frame_index >= self.open_from

    def key_frame(self, frame_index: int) -> None:
        self.sent.append(frame_index)


class Now:
    def __init__(self) -> None:
        self.frames: list[int] = []

    def submit(self, frame_index: int, frame: np.ndarray) -> Now:
        self.frames.append(frame_index)
        return self

    def done(self) -> bool:
        return True

    def wait(self, timeout: float | None) -> bool:
        return True

    def result(self) -> UpdateOutcome[None]:
        return UpdateOutcome(metric=0.5, payload=None)


class Student:
    def infer(self, frame: np.ndarray) -> np.ndarray:
        return np.zeros(frame.shape[:2], dtype=np.uint8)

    def apply(self, payload: None) -> None:
        pass


def test_the_client_loop_asks_the_gate_and_sends_only_what_it_allows() -> None:
    transport, gate = Now(), Gate(open_from=5)
    loop = ClientLoop(AlgorithmParams(min_stride=8, max_stride=8), Student(), transport, gate=gate)
    frame = np.zeros((4, 4, 3), dtype=np.uint8)
    for _ in range(14):
        loop.process(frame)
    assert gate.asked == [0, 1, 2, 3, 4, 5, 13], "held back, it asks on every frame, then at the stride"
    assert transport.frames == gate.sent == [5, 13]
