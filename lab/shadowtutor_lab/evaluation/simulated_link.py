"""A :class:`~shadowtutor.algorithms.client_loop.KeyFrameTransport` with the server in-process.

``submit`` has the server do its work at once (teacher label, Algorithm 1 on the server's
copy of the student, the trainable part of its ``state_dict`` as the update) and hands back
an update that the client loop sees as arrived only after ``delay_frames`` polls. The loop
polls once per frame after a key frame and waits (:meth:`SimulatedUpdate.wait` forces the
arrival) at MIN_STRIDE frames, so ``delay_frames=1`` is the paper's P-1 / F-1 and
``delay_frames=8`` (= MIN_STRIDE) its P-8.

Without :class:`LinkCodecs`, bytes follow the paper's accounting (Table 4): the key frame goes
up as raw BGR bytes, the update comes down as float32 tensors. With them, what crosses the
link is what the real protocol sends: the key frame is encoded as the edge agent encodes it (a
stream codec: the session's key frames as one stream; at the key-frame scale) and the server trains
on the decoded frame with the teacher's labels at its size, the weights go through the server's
:class:`UpdateEncoder` (the edge starts from the decoded full weights and receives exactly what it
would decode), and the bytes are whole KEY_FRAME and UPDATE messages.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch

from shadowtutor.algorithms.client_loop import UpdateOutcome
from shadowtutor.algorithms.coordinates import coordinates_to_send
from shadowtutor.algorithms.distill import Distiller, DistillResult
from shadowtutor.algorithms.sparse_options import SparseOptions
from shadowtutor.algorithms.update_gate import UpdateGate
from shadowtutor.algorithms.update_policy import UpdatePolicy
from shadowtutor.models.scale import boxes_to_student
from shadowtutor.protocol.codecs import (
    DELTA_WEIGHT_CODECS,
    FLOAT_WEIGHT_CODECS,
    FRAME_CODECS,
    SPARSE_WEIGHT_CODECS,
    TensorBlob,
)
from shadowtutor.protocol.messages import Update, encode
from shadowtutor.protocol.video_stream import scaled_frame_size
from shadowtutor.protocol.weight_sync import UpdateEncoder
from shadowtutor.teachers.base import TeacherAnswer, resize_labels
from shadowtutor_lab.evaluation.frame_link import FrameLink

WeightUpdate = dict[str, torch.Tensor]
LabelFor = Callable[[int, np.ndarray], TeacherAnswer]  # (frame index, frame) -> the teacher's labels and boxes


@dataclass(frozen=True)
class LinkCodecs:
    """The protocol's codecs on a simulated link, as a real session would have agreed them.

    ``weight_codec`` (a float codec) carries the full weights the edge starts from;
    ``delta_codec``, when set, carries partial updates; with a sparse delta codec the server trains
    and sends the coordinates ``sparse`` chooses, as the server's ``--sparse-*`` settings do.
    ``train_from_held`` True sets the server's student to the weights the edge holds after every
    update; the real server trains on from its own float weights (False), and the other rule
    exists to measure the difference.
    ``key_frame_scale`` in (0, 1]: key frames are sent at that share of the frame's sides (the
    edge's ``--key-frame-scale``). ``updates``: when the server sends its training, by the server's
    own :class:`~shadowtutor.algorithms.update_gate.UpdateGate` (held-back answers carry no weights).
    """

    frame_codec: str = "raw"
    frame_quality: int | None = None  # jpeg / webp; None: the codec's default
    weight_codec: str = "f32"
    delta_codec: str | None = None
    train_from_held: bool = False
    sparse: SparseOptions = SparseOptions()
    key_frame_scale: float = 1.0
    updates: UpdatePolicy = UpdatePolicy()
    # the stream's frame rate: the server's clock (a downlink budget) runs in stream time
    fps: float = 30.0

    def __post_init__(self) -> None:
        if self.frame_codec not in FRAME_CODECS:
            raise ValueError(f"unknown frame codec {self.frame_codec!r}: choose from {', '.join(FRAME_CODECS)}")
        scaled_frame_size(2, 2, self.key_frame_scale)
        if self.weight_codec not in FLOAT_WEIGHT_CODECS:
            raise ValueError(f"full weights need a float codec ({', '.join(FLOAT_WEIGHT_CODECS)}), "
                             f"got {self.weight_codec!r}")
        deltas = DELTA_WEIGHT_CODECS + SPARSE_WEIGHT_CODECS
        if self.delta_codec is not None and self.delta_codec not in deltas:
            raise ValueError(f"unknown delta codec {self.delta_codec!r}: choose from {', '.join(deltas)}")
        if self.frame_quality is not None and not 1 <= self.frame_quality <= 100:
            raise ValueError(f"frame quality must lie in 1..100, got {self.frame_quality}")
        if self.updates.gated and (self.delta_codec is None or self.train_from_held):
            raise ValueError("gated updates need a delta codec and the server training on its own weights")
        if not self.fps > 0:
            raise ValueError(f"the stream's frame rate must be > 0, got {self.fps}")


@dataclass(frozen=True)
class KeyFrameRecord:
    """What the server did for one key frame (bytes: see the module docstring)."""

    frame_index: int
    steps: int
    metric: float
    initial_metric: float
    step_seconds: tuple[float, ...]
    bytes_up: int
    bytes_down: int
    # the answer held the training back (no weights)
    held_back: bool = False


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

    def __init__(self, distiller: Distiller, label_for: LabelFor, codecs: LinkCodecs | None = None, *,
                 fps: float | None = None) -> None:
        """``fps``: the source's frame rate, the clock of a stream codec's key frames (None: the stream's
        default rate)."""
        self.distiller = distiller
        self.label_for = label_for
        self.codecs = codecs
        self._answers: list[Answer] = []
        self._encoder: UpdateEncoder | None = None
        self._frames: FrameLink | None = None
        self._gate = UpdateGate(codecs.updates) if codecs is not None and codecs.updates.gated else None
        self.welcome: WeightUpdate | None = None  # with codecs: the full weights every edge starts from
        if codecs is not None:
            self._encoder = UpdateEncoder(codecs.weight_codec, codecs.delta_codec)
            clock = {} if fps is None else {"fps": fps}
            self._frames = FrameLink(codecs.frame_codec, codecs.frame_quality, codecs.key_frame_scale, **clock)
            if codecs.delta_codec in SPARSE_WEIGHT_CODECS and codecs.sparse.trains_a_set and distiller.chooser is None:
                # as the server does for a session that agreed a sparse codec
                distiller.train_sparse(codecs.sparse)
            self._encoder.full(distiller.student.state_dict())
            self.welcome = {key: value.clone() for key, value in self._encoder.held.state.items()}
            self._sync_student()

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
        if self.codecs is None:
            taught = self.label_for(frame_index, frame)
            result = self.distiller.train(frame, taught.labels, taught.boxes)
            state = self.distiller.student.state_dict()
            update = {key: state[key].detach().clone() for key in self.distiller.trainable_keys}
            bytes_up, bytes_down = int(frame.nbytes), update_bytes(update)
            message = None
        else:
            result, update, bytes_up, bytes_down, message = self._answer_encoded(position, frame_index, frame)
        metric = result.metric if message is None else message.metric
        initial_metric = result.initial_metric if message is None else message.initial_metric
        record = KeyFrameRecord(
            frame_index=frame_index,
            steps=result.steps,
            metric=metric,
            initial_metric=initial_metric,
            step_seconds=tuple(result.step_seconds),
            bytes_up=bytes_up,
            bytes_down=bytes_down,
            held_back=message is not None and message.held_back,
        )
        outcome = UpdateOutcome(metric=metric, payload=update, steps=result.steps, initial_metric=initial_metric)
        self._answers.append((outcome, record))
        return self._answers[-1]

    def _answer_encoded(
        self, position: int, frame_index: int, frame: np.ndarray
    ) -> tuple[DistillResult, WeightUpdate, int, int, Update]:
        """The server's work on the frame as the edge encodes it; the update as the edge decodes it, its
        bytes and the UPDATE message."""
        encoder, frames, codecs = self._encoder, self._frames, self.codecs
        assert encoder is not None and frames is not None and codecs is not None
        delivered = frames.send(frame_index, frame)
        seen = delivered.frame
        taught = self.label_for(frame_index, seen)
        labels, boxes = taught.labels, taught.boxes
        if seen.shape != frame.shape:
            height, width = seen.shape[:2]
            labels = resize_labels(labels, height, width)
            boxes = boxes_to_student(boxes, frame.shape, (width, height))
        result = self.distiller.train(seen, labels, boxes)
        now = frame_index / codecs.fps
        decision = None
        if self._gate is not None:
            key_frame = self.distiller.prepare_on_host(seen, labels, boxes)
            decision = self._gate.decide(self.distiller, key_frame, result.weights, encoder.held.state, now)
        update: WeightUpdate = {}
        blob = TensorBlob([], b"")
        if decision is None or decision.send:
            held = dict(encoder.held.state)
            state, keys = self.distiller.student.state_dict(), self.distiller.trainable_keys
            coordinates = coordinates_to_send(encoder, self.distiller.chooser, codecs.sparse, state, keys)
            blob = encoder.partial(state, keys, coordinates)
            update = {name: value.clone() for name, value in encoder.held.state.items() if value is not held[name]}
        self._sync_student()
        answer = Update(
            seq=position, base_version=position, version=position + 1,
            metric=result.metric if decision is None else decision.metric_after(),
            initial_metric=result.initial_metric if decision is None else decision.edge_metric,
            steps=result.steps, full=False, tensors=blob.tensors,
            distill_ms=1000.0 * sum(result.step_seconds), payload=blob.payload,
            held_back=decision is not None and not decision.send,
        )
        size = len(encode(answer))
        if self._gate is not None:
            self._gate.answered(now, size, not answer.held_back)
        return result, update, delivered.message_bytes, size, answer

    def _sync_student(self) -> None:
        """With ``train_from_held``: train on from the weights the edge holds."""
        if self.codecs is not None and self.codecs.train_from_held:
            self.distiller.student.load_state_dict(self._encoder.held.state, strict=False)


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
