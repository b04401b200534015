"""What the ingress asks a teaching replica (plain data: Ray pickles it between processes)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from shadowtutor.protocol.messages import Hello, Message


@dataclass(frozen=True)
class OpenSession:
    """A new distill session: the HELLO (without its token) and what the handshake agreed."""

    hello: Hello
    session_id: str
    frame_codec: str
    weight_codec: str
    delta_codec: str | None
    student_size: tuple[int, int] | None
    telemetry_interval: float | None


@dataclass(frozen=True)
class SessionRef:
    """The session a request is for, as the ingress last saw it: ``version`` is the version last
    sent to the edge (a replica whose copy differs rebuilds the session from its checkpoint)."""

    session_id: str
    version: int


@dataclass(frozen=True)
class TrainKeyFrame:
    session: SessionRef
    seq: int
    frame_index: int
    base_version: int
    # BGR, decoded and checked by the ingress
    frame: np.ndarray


@dataclass(frozen=True)
class Resync:
    session: SessionRef
    have_version: int


@dataclass(frozen=True)
class LabelKeyFrame:
    """A naive-mode key frame: the teacher's labels only."""

    seq: int
    frame_index: int
    frame: np.ndarray


@dataclass(frozen=True)
class Answer:
    """A replica's answer (``message``: what goes to the edge) with what the ingress's metrics
    show."""

    message: Message
    # "HOST:PID" of the replica that answered
    replica: str
    # sessions whose student that replica holds now
    sessions: int
    # the session was rebuilt there from its checkpoint to answer this
    moved: bool = False
    # the checkpoint written for this answer, if one was
    checkpoint_seconds: float | None = None
    checkpoint_bytes: int | None = None
