"""A distill session's model state as bytes, and the session rebuilt from them in any process.

:func:`snapshot` takes what the next key frame needs: the trainable weights, Adam's state, the
version, the weights the edge holds (the encoder's mirror, so the next partial update is the one
the original session would have sent), the agreement of the HELLO (without its token), and the
last reply with its key frame's ``seq`` (so a key frame whose answer was lost with its process is
answered again, not trained twice). :func:`restore` rebuilds the session on a fresh copy of the
base student: its next UPDATE continues the version sequence the edge holds.
"""

from __future__ import annotations

import dataclasses
import io
import os
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from services.server.session import EdgeSession, Traffic
from shadowtutor.algorithms.distill import Distiller, DistillResult
from shadowtutor.algorithms.params import AlgorithmParams
from shadowtutor.algorithms.sparse_options import SparseOptions
from shadowtutor.protocol.messages import Hello, Message, decode, encode

FORMAT = 1


class CheckpointFormatError(ValueError):
    """Bytes that are not a session checkpoint of this format."""


@dataclass
class Restored:
    session: EdgeSession
    reply: Message | None  # the answer to the key frame ``reply_seq``, kept for a retry
    reply_seq: int | None
    saved_at: float  # time.time() of the snapshot
    writer: str  # who took it: "HOST:PID" of the process that held the session


def snapshot(
    session: EdgeSession, reply: Message | None = None, reply_seq: int | None = None,
    trained: DistillResult | None = None,
) -> bytes:
    """The checkpoint of a distill ``session`` after it sent ``reply`` for the key frame ``reply_seq``
    (taken by this process: its ``HOST:PID`` is the checkpoint's writer). ``trained``: the result of the
    training that ``reply`` answers, whose host copies of the weights and the optimiser's state are the
    session's (None: :meth:`Distiller.state_on_host`)."""
    distiller = session.distiller
    if distiller is None:
        raise ValueError("a naive-mode session has no model state to checkpoint")
    keys = distiller.trainable_keys
    weights, optimizer = (
        (trained.weights, trained.optimizer_state) if trained is not None else distiller.state_on_host()
    )
    record = {
        "format": FORMAT,
        "hello": encode(dataclasses.replace(session.hello, token=None)),
        "session_id": session.session_id,
        "frame_codec": session.frame_codec,
        "weight_codec": session.weight_codec,
        "delta_codec": session.delta_codec,
        "telemetry_interval": session.telemetry_interval,
        "student_size": distiller.student_size,
        "version": session.version,
        "last_seq": session.last_seq,
        "weights": weights,
        "optimizer": optimizer,
        "mirror": session.encoder.mirror(keys),
        "sparse": None if distiller.chooser is None else {
            "fraction": distiller.chooser.options.fraction, "every": distiller.chooser.options.every,
            "chooser": distiller.chooser.state(),
        },
        "reply": encode(reply) if reply is not None else None,
        "reply_seq": reply_seq,
        "saved_at": time.time(),
        "writer": f"{socket.gethostname()}:{os.getpid()}",
    }
    buffer = io.BytesIO()
    torch.save(record, buffer)
    return buffer.getvalue()


def restore(
    data: bytes, params: AlgorithmParams, new_distiller: Callable[[tuple[int, int] | None], Distiller]
) -> Restored:
    """The session ``data`` was taken from, on ``new_distiller(student_size)`` (a fresh base student on
    this process's device); :class:`CheckpointFormatError` for bytes that are not a checkpoint."""
    try:
        record = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
        if record.get("format") != FORMAT:
            raise CheckpointFormatError(f"checkpoint format {record.get('format')!r}, expected {FORMAT}")
        hello = decode(record["hello"])
    except CheckpointFormatError:
        raise
    except Exception as exc:
        raise CheckpointFormatError(f"not a session checkpoint: {exc}") from None
    if not isinstance(hello, Hello):
        raise CheckpointFormatError("not a session checkpoint: no HELLO")
    distiller = new_distiller(record["student_size"])
    distiller.student.load_state_dict(record["weights"], strict=False)
    distiller.optimizer.load_state_dict(record["optimizer"])
    sparse = record.get("sparse")
    session = EdgeSession(
        hello=hello, frame_codec=record["frame_codec"], weight_codec=record["weight_codec"], params=params,
        traffic=Traffic(), distiller=distiller, delta_codec=record["delta_codec"],
        telemetry_interval=record["telemetry_interval"], session_id=record["session_id"],
        sparse=SparseOptions() if sparse is None else SparseOptions(sparse["fraction"], sparse["every"]),
    )
    if sparse is not None and distiller.chooser is not None:
        distiller.chooser.load_state(sparse["chooser"])
    session.version = record["version"]
    session.last_seq = record["last_seq"]
    session.encoder.restore_mirror(record["mirror"])
    reply = decode(record["reply"]) if record["reply"] is not None else None
    return Restored(session, reply, record["reply_seq"], record["saved_at"], record["writer"])


def header(data: bytes) -> dict[str, object]:
    """What a checkpoint says about itself without rebuilding the session: ``session_id``, ``version``,
    ``saved_at`` and ``writer`` (:class:`CheckpointFormatError` for bytes that are not a checkpoint)."""
    try:
        record = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except Exception as exc:
        raise CheckpointFormatError(f"not a session checkpoint: {exc}") from None
    return {key: record.get(key) for key in ("session_id", "version", "saved_at", "writer")}
