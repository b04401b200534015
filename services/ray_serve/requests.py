"""What the ingress asks a teaching replica (plain data: Ray pickles it between processes)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from services.checkpoints.keeper import SessionRef
from shadowtutor.protocol.agreement import Agreement
from shadowtutor.protocol.messages import Hello, Message


@dataclass(frozen=True, kw_only=True)
class OpenSession:
    """A new distill session: the HELLO (without its token) and what the handshake agreed."""

    hello: Hello
    session_id: str
    agreement: Agreement
    telemetry_interval: float | None


@dataclass(frozen=True, kw_only=True)
class ResumeSession:
    """An edge's reconnect asking to go on with ``session`` (at the version it holds) under the
    agreement of its new HELLO (without its token)."""

    hello: Hello
    session: SessionRef
    agreement: Agreement
    telemetry_interval: float | None


@dataclass(frozen=True)
class TrainKeyFrame:
    """The ingress's request to a teaching replica: answer key frame ``seq`` of the session with an
    update from ``base_version`` (the frame decoded and checked by the ingress)."""

    session: SessionRef
    seq: int
    frame_index: int
    base_version: int
    # BGR, decoded and checked by the ingress
    frame: np.ndarray


@dataclass(frozen=True)
class Resync:
    """The ingress's request to a teaching replica: the session's full weights for an edge that
    holds ``have_version``."""

    session: SessionRef
    have_version: int


@dataclass(frozen=True)
class LabelKeyFrame:
    """A naive-mode key frame: the teacher's labels only."""

    seq: int
    frame_index: int
    frame: np.ndarray


@dataclass(frozen=True)
class ReleaseSlot:
    """Drop ``edge_id``'s slot on the replica ``replica_id`` (a Serve replica's unique id) only: its
    session moved to another replica (``ended`` False) or ended (True)."""

    edge_id: str
    replica_id: str
    ended: bool = False


@dataclass(frozen=True, kw_only=True)
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
    # the Serve unique id of the replica that answered (what a release names)
    replica_id: str = ""
