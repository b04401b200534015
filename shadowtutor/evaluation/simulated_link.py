"""A :class:`~shadowtutor.algorithms.client_loop.KeyFrameTransport` with the server in-process.

``submit`` has the server do its work at once (teacher label, Algorithm 1 on the server's
copy of the student, the trainable part of its ``state_dict`` as the update) and hands back
an update that the client loop sees as arrived only after ``delay_frames`` polls. The loop
polls once per frame after a key frame and waits (:meth:`SimulatedUpdate.wait` forces the
arrival) at MIN_STRIDE frames, so ``delay_frames=1`` is the paper's P-1 / F-1 and
``delay_frames=8`` (= MIN_STRIDE) its P-8.

Bytes follow the paper's accounting (Table 4): the key frame goes up as raw BGR bytes, the
update comes down as float32 tensors; the real wire codecs may compress both.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch

from shadowtutor.algorithms.client_loop import UpdateOutcome
from shadowtutor.algorithms.distill import Distiller

WeightUpdate = dict[str, torch.Tensor]
LabelFor = Callable[[int, np.ndarray], np.ndarray]  # (frame index, frame) -> teacher labels


@dataclass(frozen=True)
class KeyFrameRecord:
    """What the server did for one key frame."""

    frame_index: int
    steps: int
    metric: float
    initial_metric: float
    step_seconds: tuple[float, ...]
    bytes_up: int
    bytes_down: int


class SimulatedUpdate:
    """A :class:`~shadowtutor.algorithms.client_loop.PendingUpdate` that arrives after ``delay_frames`` polls."""

    def __init__(self, outcome: UpdateOutcome[WeightUpdate], delay_frames: int) -> None:
        self._outcome = outcome
        self._delay = delay_frames
        self._polls = 0

    def done(self) -> bool:
        if self._polls < self._delay:
            self._polls += 1
        return self._polls >= self._delay

    def wait(self, timeout: float | None) -> bool:
        self._polls = self._delay
        return True

    def result(self) -> UpdateOutcome[WeightUpdate] | None:
        return self._outcome if self._polls >= self._delay else None


Answer = tuple[UpdateOutcome[WeightUpdate], KeyFrameRecord]


def update_bytes(update: WeightUpdate) -> int:
    """Size of an update sent as float32 tensors."""
    return sum(t.numel() for t in update.values()) * 4


class SimulatedServer:
    """The server side of one edge session, run in-process: teacher label, Algorithm 1, update.

    Several edges may share one server when they send the same key frames in the same
    order, as settings that differ only in the update delay do (P-1 and P-8: the server's
    student never depends on when the edge applies its updates, and the next key frame
    comes after the update landed either way). The n-th key frame of every edge is then
    answered by the same training, done once; an edge that sends another frame is an error.
    """

    def __init__(self, distiller: Distiller, label_for: LabelFor) -> None:
        self.distiller = distiller
        self.label_for = label_for
        self._answers: list[Answer] = []

    def answer(self, position: int, frame_index: int, frame: np.ndarray) -> Answer:
        """The answer to an edge's ``position``-th key frame (0-based), training if no edge sent it yet."""
        if position < len(self._answers):
            outcome, record = self._answers[position]
            if record.frame_index != frame_index:
                raise RuntimeError(
                    f"edges sharing a server diverged: key frame #{position} is frame {frame_index} for one "
                    f"edge and frame {record.frame_index} for another"
                )
            return outcome, record
        if position != len(self._answers):
            raise RuntimeError(f"key frame #{position} sent before #{len(self._answers)}")
        label = self.label_for(frame_index, frame)
        result = self.distiller.train(frame, label)
        state = self.distiller.student.state_dict()
        update = {key: state[key].detach().clone() for key in self.distiller.trainable_keys}
        record = KeyFrameRecord(
            frame_index=frame_index,
            steps=result.steps,
            metric=result.metric,
            initial_metric=result.initial_metric,
            step_seconds=tuple(result.step_seconds),
            bytes_up=int(frame.nbytes),
            bytes_down=update_bytes(update),
        )
        self._answers.append((UpdateOutcome(result.metric, update, result.steps), record))
        return self._answers[-1]


@dataclass
class SimulatedLink:
    """One edge's link to a :class:`SimulatedServer`; records the edge's key frames."""

    server: SimulatedServer
    delay_frames: int
    records: list[KeyFrameRecord] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.delay_frames < 1:
            raise ValueError(f"delay_frames must be >= 1 (updates land after their key frame): {self.delay_frames}")

    def submit(self, frame_index: int, frame: np.ndarray) -> SimulatedUpdate:
        outcome, record = self.server.answer(len(self.records), frame_index, frame)
        self.records.append(record)
        return SimulatedUpdate(outcome, self.delay_frames)
