"""Checking the server's WELCOME against what this edge offered in its HELLO (the edge's side of
``services.server.connections.handshake``): the session's terms, or the reason the edge cannot use
them."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Protocol

from edge_agent.errors import ServerRefusedError
from edge_agent.versioning import WeightUpdate
from shadowtutor.algorithms.params import AlgorithmParams
from shadowtutor.protocol.codecs import decode_tensors, is_delta_codec
from shadowtutor.protocol.errors import ErrorCode, ProtocolError
from shadowtutor.protocol.messages import Hello, Welcome
from shadowtutor.protocol.tensor_layout import Layout


class WeightSink(Protocol):
    """Where full weights that arrive on their own go (the :class:`VersionedStudent`), and the
    session and version of the weights it holds."""

    session_id: str | None
    version: int

    @property
    def full_layout(self) -> Layout:
        """The name and shape of every tensor full weights must hold."""
        ...

    def stage(self, update: WeightUpdate) -> None: ...


@dataclass(kw_only=True, frozen=True)
class SessionTerms:
    """What the server's WELCOME set for one session: its id, the algorithm's parameters and the
    codecs both sides use. Made by :func:`accept_welcome`; read by the agent and the transport."""

    session_id: str
    params: AlgorithmParams
    frame_codec: str
    # full weights
    weight_codec: str
    # partial updates as quantised deltas, when agreed
    delta_codec: str | None = None
    # seconds between TELEMETRY reports the server asked for
    telemetry_interval: float | None = None
    # the student's input scale on both sides; None: the frame's
    student_size: tuple[int, int] | None = None

    def update_codec(self, full: bool) -> str:
        """The codec of an UPDATE's blob."""
        return self.weight_codec if full or self.delta_codec is None else self.delta_codec


def resuming(hello: Hello, terms: SessionTerms | None, weights: WeightSink | None) -> Hello:
    """``hello`` asking to resume the session of ``terms`` (the last one this edge had) at the
    version ``weights`` hold, where they hold that session's weights; else ``hello`` as it is."""
    if terms is None or weights is None or weights.session_id != terms.session_id:
        return hello
    return dataclasses.replace(
        hello, resume_session_id=terms.session_id, resume_version=weights.version
    )


def accept_welcome(hello: Hello, welcome: Welcome, weights: WeightSink | None) -> SessionTerms:
    """The terms of the session ``welcome`` opens for ``hello``; its weights are staged in
    ``weights`` (distill mode), unless it resumes the session ``hello`` asked to resume (the edge
    keeps the weights it holds). Raises :class:`ServerRefusedError` for terms this edge cannot use
    (a reconnect would not help) and ``ProtocolError`` for a malformed WELCOME."""
    if list(welcome.class_names) != list(hello.class_names):
        raise ServerRefusedError(
            ErrorCode.INCOMPATIBLE_MODEL,
            f"the server's classes {welcome.class_names} differ from this edge's "
            f"{list(hello.class_names)}",
        )
    if not _offered(hello, welcome):
        raise ServerRefusedError(
            ErrorCode.UNSUPPORTED_CODEC,
            f"the server chose codecs {welcome.frame_codec}/{welcome.weight_codec} (deltas "
            f"{welcome.delta_codec}), which this edge did not offer in those roles",
        )
    if welcome.update_gating and not hello.update_gating:
        raise ProtocolError(
            ErrorCode.BAD_MESSAGE, "WELCOME gates updates; this edge did not offer to read them"
        )
    try:
        params = AlgorithmParams.from_dict(welcome.params)
    except (TypeError, ValueError) as exc:
        raise ProtocolError(ErrorCode.BAD_MESSAGE, f"WELCOME params: {exc}") from None
    if welcome.resumed:
        if (welcome.session_id, welcome.version) != (hello.resume_session_id, hello.resume_version):
            raise ProtocolError(
                ErrorCode.BAD_MESSAGE,
                f"WELCOME resumes session {welcome.session_id[:36]!r} at version "
                f"{welcome.version}; this edge asked for {hello.resume_session_id!r} at "
                f"{hello.resume_version}",
            )
    elif weights is not None:
        if not welcome.tensors:
            raise ProtocolError(ErrorCode.BAD_MESSAGE, "WELCOME carries no weights in distill mode")
        tensors = decode_tensors(
            welcome.tensors,
            welcome.payload,
            welcome.weight_codec,
            weights.full_layout,
            complete=True,
        )
        weights.stage(
            WeightUpdate(
                session_id=welcome.session_id,
                version=welcome.version,
                base_version=welcome.version,
                full=True,
                tensors=tensors,
                origin="welcome",
            )
        )
    interval = welcome.telemetry_interval
    if interval is not None and not (math.isfinite(interval) and interval >= 1.0):
        raise ProtocolError(
            ErrorCode.BAD_MESSAGE, f"WELCOME telemetry_interval {interval!r}: at least 1 s or null"
        )
    return SessionTerms(
        session_id=welcome.session_id,
        params=params,
        frame_codec=welcome.frame_codec,
        weight_codec=welcome.weight_codec,
        delta_codec=welcome.delta_codec,
        telemetry_interval=interval,
        student_size=_student_size(hello, welcome),
    )


def _student_size(hello: Hello, welcome: Welcome) -> tuple[int, int] | None:
    """The WELCOME's student size: [W, H] of positive ints, the one this edge announced if any."""
    size = welcome.student_size
    if size is not None and (len(size) != 2 or min(size) <= 0):
        raise ProtocolError(
            ErrorCode.BAD_MESSAGE, f"WELCOME student_size {size!r}: [W, H] positive or null"
        )
    if hello.student_size is not None and size != hello.student_size:
        raise ServerRefusedError(
            ErrorCode.INCOMPATIBLE_MODEL,
            f"the server distils at student size {size}, this edge's student runs at "
            f"{hello.student_size}",
        )
    return (size[0], size[1]) if size is not None else None


def _offered(hello: Hello, welcome: Welcome) -> bool:
    """The WELCOME's codecs were offered: a float codec for full weights, a delta codec (if any) for
    deltas."""
    delta = welcome.delta_codec
    return (
        welcome.frame_codec in hello.frame_codecs
        and welcome.weight_codec in hello.weight_codecs
        and not is_delta_codec(welcome.weight_codec)
        and (delta is None or (delta in hello.weight_codecs and is_delta_codec(delta)))
    )
