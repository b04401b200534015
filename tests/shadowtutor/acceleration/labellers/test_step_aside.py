"""An acceleration on trial steps aside for the plain student when it is measured slower, and only then.

The slower and faster labellers here are the real student with a fixed sleep added (a test double):
the outcome of a real acceleration's trial depends on this machine's load, theirs does not.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Iterable, Iterator, Mapping

import numpy as np
import pytest
import torch

from shadowtutor.acceleration.labellers.base import label_stream
from shadowtutor.acceleration.labellers.step_aside import StepAside
from shadowtutor.acceleration.labellers.student import StudentLabeller
from shadowtutor.classes import LVS_CLASSES
from shadowtutor.models.student import StudentNet


class Slowed(StudentLabeller):
    """The torch student, ``delay`` seconds slower a frame; ``ahead`` frames drawn early by :meth:`pipeline`."""

    def __init__(self, delay: float, name: str, ahead: int = 0) -> None:
        super().__init__("torch")
        self.delay, self.name, self.ahead = delay, name, ahead
        self.frames: list[int] = []  # the first pixel of every frame labelled
        self.updates = 0
        self.drawn: deque[np.ndarray] = deque()
        self.closed = False

    @property
    def kind(self) -> str:
        return self.name

    def apply(self, update: Mapping[str, torch.Tensor]) -> None:
        super().apply(update)
        self.updates += 1

    def label(self, frame: np.ndarray) -> np.ndarray:
        time.sleep(self.delay)
        self.frames.append(int(frame[0, 0, 0]))
        return super().label(frame)

    def pipeline(self, frames: Iterable[np.ndarray]) -> Iterator[np.ndarray]:
        source = iter(frames)
        while True:
            while len(self.drawn) <= self.ahead:
                frame = next(source, None)
                if frame is None:
                    break
                self.drawn.append(frame)
            if not self.drawn:
                return
            yield self.drawn.popleft()

    def release(self) -> list[np.ndarray]:
        frames = list(self.drawn)
        self.drawn.clear()
        return frames

    def close(self) -> None:
        self.closed = True


def numbered(count: int) -> list[np.ndarray]:
    return [np.full((32, 48, 3), i, dtype=np.uint8) for i in range(count)]


def loaded(trial: StepAside) -> StepAside:
    torch.manual_seed(0)
    trial.load(StudentNet(len(LVS_CLASSES)).state_dict(), LVS_CLASSES)
    return trial


def test_a_slower_acceleration_steps_aside_once_and_hands_over_every_frame_it_drew(
    caplog: pytest.LogCaptureFixture,
) -> None:
    candidate, plain = Slowed(0.02, "slow", ahead=2), Slowed(0.0, "plain")
    trial = loaded(StepAside(candidate, plain, frames=4, warmup=1, probe_every=2))
    with caplog.at_level(logging.INFO, "shadowtutor.acceleration.labellers.step_aside"):
        labels = list(label_stream(trial, numbered(12)))
    assert len(labels) == 12
    # 1 warm-up + 4 timed frames by the candidate, then every later frame by plain, none lost or twice
    assert candidate.frames == list(range(5)) and candidate.closed
    probes = [1, 1, 3]  # timed frames 1 and 3: the plain student's probes (before the first, an untimed call)
    assert plain.frames == probes + list(range(5, 12))
    assert trial.kind == "plain" and trial.stats().trial is not None
    result = trial.stats().trial
    assert result.stepped_aside and result.speedup < 1 and result.frames == 4
    assert [r.levelname for r in caplog.records] == ["WARNING"] and "steps aside" in caplog.text
    trial.apply({"out_conv3.bias": torch.zeros(9)})
    assert (candidate.updates, plain.updates) == (0, 1)  # weights go to the labeller in use only


def test_a_faster_acceleration_is_kept_and_both_hold_the_weights_while_on_trial() -> None:
    candidate, plain = Slowed(0.0, "fast"), Slowed(0.02, "plain")
    trial = loaded(StepAside(candidate, plain, frames=3, warmup=0, probe_every=1))
    frames = numbered(6)
    trial.label(frames[0])
    trial.apply({"out_conv3.bias": torch.zeros(9)})
    assert (candidate.updates, plain.updates) == (1, 1)  # on trial: both
    for frame in frames[1:]:
        trial.label(frame)
    result = trial.stats().trial
    assert result is not None and not result.stepped_aside and result.speedup > 1
    assert trial.kind == "fast" and candidate.frames == list(range(6)) and plain.closed
    assert trial.stats().trial.to_dict()["stepped_aside"] is False


def test_a_trial_needs_frames() -> None:
    with pytest.raises(ValueError, match="frames >= 1"):
        StepAside(Slowed(0, "a"), Slowed(0, "b"), frames=0)
