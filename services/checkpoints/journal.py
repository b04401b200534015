"""A session's journal: for every trained version, what the edge was sent, small enough to store
before the answer leaves; and a restored snapshot brought forward through the entries after it.

:func:`entry` is one version's record as stored (``CheckpointStore.append``): the UPDATE answering
the key frame ``reply_seq``, which takes the edge from the version before to this one, and the
session's ``last_seq``. :func:`replay` applies the entries that follow a snapshot to the session
:func:`~services.checkpoints.session.restore` rebuilt from it: the mirror takes each UPDATE
by the edge's own rule, so it holds the edge's weights bit for bit at the newest version, and the
session trains on from them: its weights become the mirror's, Adam's state and the sparse chooser
stay as of the snapshot. Only a session restored from a snapshot of its newest version trains on
exactly as the original would have (docs/design/session_checkpoints.md).

Entries are checked like snapshots (``services.checkpoints.checks``): bounded, loaded
without code, every field of its type, the edge and session those asked for, each UPDATE one
version further than the session and fitting the held weights. A record that fails is a
:class:`CheckpointFormatError` and the session is left as it was before that entry.
"""

from __future__ import annotations

import dataclasses
import os
import socket
import time
from collections.abc import Sequence

from services.checkpoints.checks import CheckpointFormatError, check_fields
from services.checkpoints.pack import archive, unarchive
from services.checkpoints.session import FORMAT, INT, OPTIONAL_INT, Restored, decoded
from services.server.teaching.session import EdgeSession
from shadowtutor.protocol.errors import ProtocolError
from shadowtutor.protocol.messages import Update, encode

KIND = "journal"
# each field of an entry and the types it may hold
FIELDS: dict[str, tuple[type, ...]] = {
    "format": INT,
    "kind": (str,),
    "edge_id": (str,),
    "session_id": (str,),
    "version": INT,
    "last_seq": OPTIONAL_INT,
    "reply": (bytes,),
    "reply_seq": OPTIONAL_INT,
    "saved_at": (int, float),
    "writer": (str,),
}


def entry(session: EdgeSession, reply: Update, reply_seq: int | None) -> bytes:
    """The journal entry of ``session``'s current version, which ``reply`` (the answer to the key
    frame ``reply_seq``) brought the edge to, taken now by this process."""
    if reply.version != session.version:
        raise ValueError(
            f"the reply is of version {reply.version}, the session at {session.version}"
        )
    return archive(
        {
            "format": FORMAT,
            "kind": KIND,
            "edge_id": session.hello.edge_id,
            "session_id": session.session_id,
            "version": session.version,
            "last_seq": session.last_seq,
            "reply": encode(reply),
            "reply_seq": reply_seq,
            "saved_at": time.time(),
            "writer": f"{socket.gethostname()}:{os.getpid()}",
        }
    )


def replay(
    restored: Restored,
    entries: Sequence[bytes],
    *,
    edge_id: str,
    session_id: str,
    until: int | None = None,
) -> Restored:
    """``restored`` (a session rebuilt from its snapshot) brought forward through ``entries`` (the
    journal entries after it, oldest first) up to the first gap in their versions, and not past
    version ``until`` (if given); the answer kept for a retry becomes the last entry's.
    :class:`CheckpointFormatError` for an entry that is not one of this session's or does not fit it
    (the session stays at the entry before)."""
    session = restored.session
    applied = False
    for data in entries:
        record = unarchive(data)
        check_fields(record, FIELDS)
        if record["format"] != FORMAT or record["kind"] != KIND:
            raise CheckpointFormatError("not a journal entry of this format")
        if record["edge_id"] != edge_id or record["session_id"] != session_id:
            raise CheckpointFormatError(
                f"a journal entry of session {record['session_id'][:36]!r} of edge "
                f"{record['edge_id'][:128]!r}, not of session {session_id[:36]!r} of edge "
                f"{edge_id[:128]!r}"
            )
        if record["version"] != session.version + 1 or (
            until is not None and record["version"] > until
        ):
            break
        update = _update(record["reply"], session)
        if update.version != record["version"]:
            raise CheckpointFormatError(
                f"the journal entry of version {record['version']} holds an UPDATE to version "
                f"{update.version}"
            )
        try:
            session.encoder.replay(update.tensors, update.payload, update.full)
        except (ProtocolError, ValueError) as exc:
            raise CheckpointFormatError(
                f"the UPDATE of version {update.version} does not fit the held weights: {exc}"[:300]
            ) from None
        session.version, session.last_seq = record["version"], record["last_seq"]
        restored = dataclasses.replace(
            restored,
            reply=update,
            reply_seq=record["reply_seq"],
            saved_at=float(record["saved_at"]),
            writer=record["writer"],
        )
        applied = True
    if applied:
        _train_from_held(session)
    return restored


def _update(data: bytes, session: EdgeSession) -> Update:
    message = decoded(data, "reply")
    if not isinstance(message, Update):
        raise CheckpointFormatError(f"reply: a {type(message).__name__}, not an UPDATE")
    if not message.full and message.base_version != session.version:
        raise CheckpointFormatError(
            f"an UPDATE from version {message.base_version} after version {session.version}"
        )
    return message


def _train_from_held(session: EdgeSession) -> None:
    """The session's trainable weights become those the edge holds."""
    distiller = session.distiller
    assert distiller is not None, "a journal belongs to a distill session"
    held = session.encoder.held.state
    distiller.student.load_state_dict(
        {key: held[key] for key in distiller.trainable_keys}, strict=False
    )
    session.edge_weights_known = True
