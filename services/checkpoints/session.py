"""A distill session's model state as bytes, and the session rebuilt from them in any process.

:func:`capture` takes what the next key frame needs: the trainable weights, Adam's state, the
version, the weights the edge holds (the encoder's mirror, so the next partial update is the one
the original session would have sent), the agreement of the HELLO (without its token), and the
last reply with its key frame's ``seq`` (so a key frame whose answer was lost with its process is
answered again, not trained twice); :func:`pack` makes it bytes in the compact, lossless form of
``services.checkpoints.pack`` (any thread, while the session trains on); :func:`snapshot`
does both. :func:`restore` rebuilds the session on a fresh copy of the base student: bit for bit
the weights, Adam's state and the mirror it was taken from, so its next UPDATE continues the
version sequence the edge holds and is the one the original session would have sent.

:func:`restore` uses nothing it has not checked (``services.checkpoints.checks``): a
bounded zstd frame holding a bounded zip archive, loaded with ``weights_only`` (a checkpoint
of format 1, an earlier release's, is refused unread); the HELLO's edge and the session id those of
the slot asked for; every field of its type; the weights, the mirror and Adam's state exactly
the student's keys, shapes and dtypes; the student size within the frame bounds. Anything else
is a :class:`CheckpointFormatError`, raised before the session is touched.
"""

from __future__ import annotations

import dataclasses
import os
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from services.checkpoints.checks import (
    CheckpointFormatError,
    check_coordinates,
    check_fields,
    check_optimizer,
    check_sparse,
    check_tensors,
)
from services.checkpoints.pack import (
    archive,
    pack_tensor,
    unarchive,
    unpack_tensor,
    unpack_tensors,
)
from services.server.teaching.session import EdgeSession, Traffic
from shadowtutor.algorithms.distill import Distiller, DistillResult
from shadowtutor.algorithms.params import AlgorithmParams
from shadowtutor.algorithms.sparse_options import SparseOptions
from shadowtutor.algorithms.update_policy import UpdatePolicy
from shadowtutor.protocol.agreement import Agreement
from shadowtutor.protocol.codecs import FRAME_CODECS, WEIGHT_CODECS
from shadowtutor.protocol.messages import Hello, Message, decode, encode
from shadowtutor.protocol.sparse_delta import is_sparse_codec

FORMAT = 2
INT, OPTIONAL_INT = (int,), (int, type(None))
# each field of the record and the types it may hold (weights, optimizer and mirror: checked
# further)
FIELDS: dict[str, tuple[type, ...]] = {
    "format": INT,
    "hello": (bytes,),
    "session_id": (str,),
    "frame_codec": (str,),
    "weight_codec": (str,),
    "delta_codec": (str, type(None)),
    "telemetry_interval": (int, float, type(None)),
    "student_size": (list, tuple, type(None)),
    "version": INT,
    "last_seq": OPTIONAL_INT,
    "weights": (dict,),
    "optimizer": (dict,),
    "mirror": (dict,),
    "reply": (bytes, type(None)),
    "reply_seq": OPTIONAL_INT,
    "saved_at": (int, float),
    "writer": (str,),
}


@dataclass(kw_only=True)
class Restored:
    """A session rebuilt from its checkpoint, with the answer it last gave (for an edge that retries
    that key frame) and who wrote the checkpoint when."""

    session: EdgeSession
    # the answer to the key frame ``reply_seq``, kept for a retry
    reply: Message | None
    reply_seq: int | None
    # time.time() of the snapshot
    saved_at: float
    # who took it: "HOST:PID" of the process that held the session
    writer: str
    # the version of the snapshot it was rebuilt from (journal entries may have taken it further)
    snapshot_version: int


def capture(
    session: EdgeSession,
    reply: Message | None = None,
    reply_seq: int | None = None,
    trained: DistillResult | None = None,
) -> dict[str, Any]:
    """The checkpoint record of a distill ``session`` after it sent ``reply`` for the key frame
    ``reply_seq``, taken now by this process (its ``HOST:PID`` is the writer): host copies of
    everything, which nothing changes later, so :func:`pack` may turn it into bytes in any thread
    while the session trains on. ``trained``: the result of the training that ``reply`` answers,
    whose host copies of the weights and the optimiser's state are the session's (None:
    :meth:`Distiller.state_on_host`)."""
    distiller = session.distiller
    if distiller is None:
        raise ValueError("a naive-mode session has no model state to checkpoint")
    keys = distiller.trainable_keys
    weights, optimizer = (
        (trained.weights, trained.optimizer_state)
        if trained is not None
        else distiller.state_on_host()
    )
    return {
        "format": FORMAT,
        "hello": dataclasses.replace(session.hello, token=None),
        "session_id": session.session_id,
        "frame_codec": session.agreement.frame_codec,
        "weight_codec": session.agreement.weight_codec,
        "delta_codec": session.agreement.delta_codec,
        "telemetry_interval": session.telemetry_interval,
        "student_size": distiller.student_size,
        "version": session.version,
        "last_seq": session.last_seq,
        "weights": weights,
        "optimizer": optimizer,
        "mirror": session.encoder.mirror(keys),
        "sparse": _sparse_record(session),
        "reply": reply,
        "reply_seq": reply_seq,
        "saved_at": time.time(),
        "writer": f"{socket.gethostname()}:{os.getpid()}",
    }


def _sparse_record(session: EdgeSession) -> dict[str, Any] | None:
    """A sparse session's options and its chooser's state (None where it trains no set); None for
    a session without a sparse delta codec."""
    distiller = session.distiller
    chooser = None if distiller is None else distiller.chooser
    options = session.sparse if chooser is None else chooser.options
    codec = session.agreement.delta_codec
    if chooser is None and (codec is None or not is_sparse_codec(codec)):
        return None
    return {
        "fraction": options.fraction,
        "every": options.every,
        "choice": options.choice,
        "chooser": None if chooser is None else chooser.state(),
    }


def pack(record: dict[str, Any]) -> bytes:
    """The stored form of a :func:`capture` record: the weights and Adam's moments as byte planes,
    the weights the edge holds and the values last sent as their difference from the weights (the
    values last sent only where they differ), messages encoded, all zstd-compressed
    (``checkpoint_pack``)."""
    weights = record["weights"]
    references = {key: value.float() for key, value in weights.items()}
    optimizer, mirror = record["optimizer"], record["mirror"]
    return archive(
        {
            **record,
            "hello": encode(record["hello"]),
            "reply": encode(record["reply"]) if record["reply"] is not None else None,
            "weights": {key: pack_tensor(value) for key, value in weights.items()},
            "optimizer": {
                **optimizer,
                "state": {
                    index: {
                        name: pack_tensor(value)
                        if isinstance(value, torch.Tensor) and value.dim() > 0
                        else value
                        for name, value in entry.items()
                    }
                    for index, entry in optimizer["state"].items()
                },
            },
            "mirror": {
                "held": {
                    key: pack_tensor(value, references[key])
                    for key, value in mirror["held"].items()
                },
                "sent": {
                    key: pack_tensor(value, references[key])
                    for key, value in mirror["sent"].items()
                    if not torch.equal(value, references[key])
                },
                "coordinates": mirror["coordinates"],
            },
        }
    )


def snapshot(
    session: EdgeSession,
    reply: Message | None = None,
    reply_seq: int | None = None,
    trained: DistillResult | None = None,
) -> bytes:
    """:func:`pack` of :func:`capture`: the checkpoint's bytes, taken now."""
    return pack(capture(session, reply, reply_seq, trained))


def restore(
    data: bytes,
    params: AlgorithmParams,
    new_distiller: Callable[[tuple[int, int] | None], Distiller],
    *,
    edge_id: str,
    session_id: str,
    max_size: tuple[int, int],
    updates: UpdatePolicy | None = None,
) -> Restored:
    """The session ``data`` was taken from, on ``new_distiller(student_size)`` (a fresh base student
    on this process's device), if ``data`` is a checkpoint of session ``session_id`` of edge
    ``edge_id`` for this student with a student size within ``max_size``, gating its updates by
    ``updates`` (None: not gated; the gate's recent key frames are not kept: it starts afresh);
    :class:`CheckpointFormatError` (one line) for anything else, and nothing of ``data`` used."""
    record = _load(data)
    check_fields(record, FIELDS)
    if record["format"] != FORMAT:
        raise CheckpointFormatError(f"checkpoint format {record['format']!r}, expected {FORMAT}")
    hello = decoded(record["hello"], "hello")
    if not isinstance(hello, Hello):
        raise CheckpointFormatError("not a session checkpoint: no HELLO")
    if hello.edge_id != edge_id or record["session_id"] != session_id:
        raise CheckpointFormatError(
            f"it holds session {record['session_id'][:36]!r} of edge {hello.edge_id[:128]!r}, not "
            "session "
            f"{session_id[:36]!r} of edge {edge_id[:128]!r}"
        )
    _check_codecs(record)
    if record["version"] < 0 or (record["telemetry_interval"] or 0) < 0:
        raise CheckpointFormatError("a negative version or telemetry interval")
    reply = decoded(record["reply"], "reply") if record["reply"] is not None else None
    student_size = _student_size(record["student_size"], max_size)
    distiller = new_distiller(student_size)
    student = distiller.student.state_dict()
    expected = {key: student[key] for key in distiller.trainable_keys}
    weights = unpack_tensors("weights", record["weights"], expected)
    check_tensors("weights", weights, expected)
    mirror = _mirror(record["mirror"], weights)
    check_coordinates(mirror.get("coordinates"), expected)
    sparse = record.get("sparse")
    check_sparse(sparse, expected)
    params_in_order = [p for group in distiller.optimizer.param_groups for p in group["params"]]
    optimizer = _optimizer(record["optimizer"], params_in_order)
    check_optimizer(optimizer, distiller.optimizer.state_dict(), params_in_order)
    try:
        distiller.student.load_state_dict(weights, strict=False)
        distiller.optimizer.load_state_dict(optimizer)
    except (RuntimeError, KeyError, TypeError, ValueError) as exc:
        raise CheckpointFormatError(
            f"optimizer: not this student's ({type(exc).__name__}: {exc})"[:300]
        ) from None
    try:
        options = (
            None
            if sparse is None
            else SparseOptions(
                float(sparse["fraction"]), sparse["every"], sparse.get("choice", "gradient")
            )
        )
    except ValueError as exc:
        raise CheckpointFormatError(f"sparse: {exc}") from None
    session = EdgeSession(
        hello=hello,
        agreement=Agreement(
            frame_codec=record["frame_codec"],
            weight_codec=record["weight_codec"],
            delta_codec=record["delta_codec"],
            student_size=student_size,
        ),
        params=params,
        traffic=Traffic(),
        distiller=distiller,
        telemetry_interval=record["telemetry_interval"],
        session_id=record["session_id"],
        sparse=SparseOptions() if options is None else options,
        updates=UpdatePolicy() if updates is None else updates,
    )
    if sparse is not None and distiller.chooser is not None:
        distiller.chooser.load_state(sparse["chooser"])
    session.version = record["version"]
    session.last_seq = record["last_seq"]
    session.encoder.restore_mirror(mirror)
    return Restored(
        session=session,
        reply=reply,
        reply_seq=record["reply_seq"],
        saved_at=float(record["saved_at"]),
        writer=record["writer"],
        snapshot_version=record["version"],
    )


def _load(data: bytes) -> Any:
    """The record in ``data`` (bounded, loaded without code)."""
    return unarchive(data)


def _mirror(given: Any, weights: dict[str, torch.Tensor]) -> dict[str, Any]:
    """The encoder's mirror from its stored form: held values and (where stored) values last sent,
    both against the weights; a value last sent that is not stored is the weight's."""
    if not isinstance(given, dict) or not {"held", "sent"} <= set(given) <= {
        "held",
        "sent",
        "coordinates",
    }:
        raise CheckpointFormatError("mirror: not the held and sent weights")
    references = {key: value.float() for key, value in weights.items()}
    held = unpack_tensors("mirror held", given["held"], references, references)
    sent = {key: value.clone() for key, value in references.items()}
    sent.update(unpack_tensors("mirror sent", given["sent"], references, references, subset=True))
    for part, tensors in (("held", held), ("sent", sent)):
        check_tensors(f"mirror {part}", tensors, references)
    return {"held": held, "sent": sent, "coordinates": given.get("coordinates")}


def _optimizer(given: Any, params: list[torch.Tensor]) -> Any:
    """``given`` with every stored tensor of a parameter's state unpacked to that parameter's shape
    and dtype (what is not such a state is left for :func:`check_optimizer` to refuse)."""
    state = given.get("state") if isinstance(given, dict) else None
    if not isinstance(state, dict):
        return given
    unpacked = {}
    for index, entry in state.items():
        if (
            not isinstance(index, int)
            or isinstance(index, bool)
            or not 0 <= index < len(params)
            or not isinstance(entry, dict)
        ):
            return given
        unpacked[index] = {
            name: unpack_tensor(
                f"optimizer: {str(name)[:40]} of parameter {index}", value, params[index]
            )
            if isinstance(value, torch.Tensor) and value.dim() > 0
            else value
            for name, value in entry.items()
        }
    return {**given, "state": unpacked}


def decoded(data: bytes, what: str) -> Message:
    """The protocol message stored in a record's field ``what``; :class:`CheckpointFormatError`
    (one line) for bytes that are not one."""
    try:
        return decode(data)
    except Exception as exc:
        raise CheckpointFormatError(f"{what}: not a protocol message ({exc})"[:300]) from None


def _check_codecs(record: dict[str, Any]) -> None:
    if (
        record["frame_codec"] not in FRAME_CODECS
        or record["weight_codec"] not in WEIGHT_CODECS
        or (record["delta_codec"] is not None and record["delta_codec"] not in WEIGHT_CODECS)
    ):
        raise CheckpointFormatError("unknown frame or weight codecs")


def _student_size(value: Any, max_size: tuple[int, int]) -> tuple[int, int] | None:
    if value is None:
        return None
    if (
        len(value) != 2
        or not all(isinstance(n, int) and not isinstance(n, bool) for n in value)
        or not (0 < value[0] <= max_size[0] and 0 < value[1] <= max_size[1])
    ):
        raise CheckpointFormatError(
            f"student_size {list(value)[:3]} is not [W, H] within 1x1 .. "
            f"{max_size[0]}x{max_size[1]}"
        )
    return int(value[0]), int(value[1])


def header(data: bytes) -> dict[str, object]:
    """What a checkpoint says about itself without rebuilding the session: ``session_id``,
    ``version``, ``saved_at`` and ``writer`` (:class:`CheckpointFormatError` for bytes that are not
    a checkpoint)."""
    record = _load(data)
    if not isinstance(record, dict):
        raise CheckpointFormatError("not a session checkpoint (no record)")
    return {key: record.get(key) for key in ("session_id", "version", "saved_at", "writer")}
