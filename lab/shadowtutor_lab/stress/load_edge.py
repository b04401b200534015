"""A simulated camera: a real WebSocket edge (the agent's :class:`EdgeTransport`) sending key frames at a rate.

It runs no student. In distill mode it keeps the weights it holds exactly as the agent does
(:class:`VersionedStudent` over :class:`HeldWeights`): WELCOME and full updates replace them,
partial updates overwrite or add to them, an update on another base is refused with a resync.
Like the paper's client loop it has at most one key frame outstanding, so every key frame
names the version the edge really holds: a full update answering a key frame, or a resync,
would mean the server and the edge disagree.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from edge_agent.backoff import Backoff
from edge_agent.handover import LabelsReply
from edge_agent.handshake import SessionTerms
from edge_agent.transport import EdgeTransport
from edge_agent.versioning import VersionedStudent
from shadowtutor.algorithms.client_loop import UpdateOutcome
from shadowtutor.protocol.defaults import DEFAULT_FRAME_CODECS, DEFAULT_WEIGHT_CODECS
from shadowtutor.protocol.messages import Hello

AGENT = "shadowtutor-bench-load"
MODES = ("distill", "naive")


class _NoInference:
    """The runtime of a camera that only talks: weights are held by :class:`VersionedStudent` alone."""

    def load(self, state: Mapping[str, torch.Tensor], class_names: tuple[str, ...]) -> None:
        pass

    def update(self, tensors: Mapping[str, torch.Tensor]) -> None:
        pass


@dataclass(frozen=True)
class KeyFrameRecord:
    """One key frame: when it was sent (seconds since the run's start) and its answer."""

    edge: int
    frame_index: int
    sent_at: float
    turnaround: float | None  # seconds from hand-over to the answer; None: no answer
    late: float  # seconds after its scheduled time that it went out (the previous answer was slow)
    steps: int | None = None  # distillation steps the UPDATE reports (None: naive mode or no answer)


@dataclass
class _Observer:
    """The transport's events that the report needs (called on the network thread)."""

    closing: bool = False
    disconnects: int = 0
    resyncs: int = 0
    bytes_sent: int = 0
    bytes_received: int = 0

    def on_connected(self, connected: bool) -> None:
        if not connected and not self.closing:
            self.disconnects += 1

    def on_bytes(self, sent: int, received: int) -> None:
        self.bytes_sent += sent
        self.bytes_received += received

    def on_roundtrip(self, seconds: float) -> None:
        pass

    def on_reconnect(self, resumed: bool) -> None:
        pass

    def on_resync(self) -> None:
        self.resyncs += 1

    def on_key_frame_dropped(self) -> None:
        pass  # a key frame sent while disconnected resolves with no answer (turnaround None)


@dataclass
class CameraResult:
    """What one simulated camera saw; ``errors`` are the server's ERROR messages by code."""

    edge_id: str
    records: list[KeyFrameRecord] = field(default_factory=list)
    errors: dict[str, int] = field(default_factory=dict)
    disconnects: int = 0
    resyncs: int = 0
    full_answers: int = 0  # full updates answering a key frame: the server saw a base it did not send
    rejected_updates: int = 0
    bytes_sent: int = 0
    bytes_received: int = 0
    sessions: int = 0
    failure: str | None = None  # why the camera stopped early (a refusal), else None


class SimulatedCamera:
    """Sends ``frames`` (cycling with ``stride``) as key frames at ``rate`` per second from ``start`` to ``end``.

    :meth:`start` and :meth:`wait_welcome` open the session; :meth:`run` is the camera's thread body.
    """

    def __init__(
        self,
        index: int,
        url: str,
        edge_id: str,
        class_names: Sequence[str],
        frames: Sequence[np.ndarray],
        mode: str = "distill",
        stride: int = 8,
        answer_timeout: float = 60.0,
    ) -> None:
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        if not frames:
            raise ValueError("a camera needs at least one frame")
        height, width = frames[0].shape[:2]
        self.index = index
        self.frames = frames
        self.stride = stride
        self.answer_timeout = answer_timeout
        self.observer = _Observer()
        self.result = CameraResult(edge_id)
        hello = Hello(
            edge_id=edge_id, class_names=list(class_names), frame_width=width, frame_height=height,
            mode=mode, student_arch="shadowtutor-student", frame_codecs=list(DEFAULT_FRAME_CODECS),
            weight_codecs=list(DEFAULT_WEIGHT_CODECS), token=None, agent=AGENT,
        )
        self.student = None
        if mode == "distill":
            self.student = VersionedStudent(
                _NoInference(), tuple(class_names), lambda have, why: self.transport.request_resync(have, why)
            )
        self.transport = EdgeTransport(url, hello, self.student, observer=self.observer, backoff=Backoff(0.2, 2.0))
        self.session: SessionTerms | None = None

    def start(self) -> None:
        """Start the transport: it connects and says HELLO in its own thread."""
        self.transport.start()

    def wait_welcome(self, timeout: float) -> SessionTerms:
        """The first session's terms, once its WELCOME came (raises ``TransportError``)."""
        self.session = self.transport.wait_first_welcome(timeout)
        return self.session

    def run(self, start: float, end: float, rate: float, phase: float, stop: threading.Event) -> None:
        """Send key frames on schedule (``start + phase + k / rate``) until ``end``; then close."""
        period = 1.0 / rate
        due = start + phase
        frame_index = (self.index * len(self.frames)) // 7 % len(self.frames)  # cameras see different frames
        try:
            while not stop.is_set():
                stop.wait(max(0.0, due - time.monotonic()))
                now = time.monotonic()
                if now >= end or stop.is_set():
                    break
                if self.transport.fatal is not None:
                    self.result.failure = str(self.transport.fatal)
                    break
                self._key_frame(frame_index, now - start, now - due)
                frame_index = (frame_index + self.stride) % len(self.frames)
                due = max(due + period, time.monotonic())  # behind schedule: no burst to catch up
        finally:
            self.close()

    def _key_frame(self, frame_index: int, sent_at: float, late: float) -> None:
        frame = self.frames[frame_index]
        if self.student is None:
            pending = self.transport.request_labels(frame_index, frame)
        else:
            self.student.sync()  # full weights that came on their own (WELCOME after a reconnect, resync)
            pending = self.transport.submit(frame_index, frame)
        answered = pending.wait(self.answer_timeout)
        reply = pending.result() if answered else None
        turnaround = None if reply is None else pending.resolved_at - pending.submitted_at
        steps = reply.steps if isinstance(reply, UpdateOutcome) else None
        self.result.records.append(
            KeyFrameRecord(self.index, frame_index, round(sent_at, 4), turnaround, round(late, 4), steps)
        )
        if isinstance(reply, UpdateOutcome):
            self.result.full_answers += int(reply.payload.full)
            self.student.apply(reply.payload)
        elif reply is not None and not isinstance(reply, LabelsReply):
            raise TypeError(f"unexpected answer {type(reply).__name__}")

    def close(self) -> None:
        self.observer.closing = True
        self.transport.close()
        stats, result = self.transport.stats, self.result
        result.errors = dict(stats.errors)
        result.disconnects = self.observer.disconnects
        result.resyncs = self.observer.resyncs
        result.rejected_updates = self.student.rejected if self.student is not None else 0
        result.bytes_sent, result.bytes_received = stats.bytes_sent, stats.bytes_received
        result.sessions = len(stats.sessions)
