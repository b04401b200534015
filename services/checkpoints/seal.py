"""An integrity tag on a session checkpoint: an HMAC-SHA256 with the server's checkpoint secret.

With a secret (``--checkpoint-secret``), :func:`seal` prefixes a checkpoint with :data:`MAGIC` and
the HMAC of the edge id, the session id and the checkpoint's bytes; :func:`unseal` returns the
bytes only when the tag matches, so a checkpoint written without the secret, changed after, or
moved to another edge's or session's name is refused before it is read. Without a secret
checkpoints carry no tag, and a tagged one is refused (a replica without the secret cannot tell
a good one). Every refusal is a :class:`CheckpointFormatError`.
"""

from __future__ import annotations

import hashlib
import hmac

from services.checkpoints.checks import CheckpointFormatError

MAGIC = b"SHADOWTUTOR-CKPT-HMAC1\n"
TAG_BYTES = 32


def _tag(key: bytes, edge_id: str, session_id: str, data: bytes) -> bytes:
    mac = hmac.new(key, digestmod=hashlib.sha256)
    for part in (edge_id.encode(), session_id.encode()):
        mac.update(len(part).to_bytes(4, "big") + part)
    mac.update(data)
    return mac.digest()


def seal(data: bytes, key: bytes | None, edge_id: str, session_id: str) -> bytes:
    """``data`` as stored: tagged for ``edge_id``'s session ``session_id`` under ``key``, as is
    without one."""
    return data if key is None else MAGIC + _tag(key, edge_id, session_id, data) + data


def unseal(stored: bytes, key: bytes | None, edge_id: str, session_id: str) -> bytes:
    """The checkpoint in ``stored`` if its tag (or its lack of one) fits ``key`` and the slot."""
    tagged = stored.startswith(MAGIC)
    if key is None:
        if tagged:
            raise CheckpointFormatError(
                "it carries an integrity tag and this server has no checkpoint secret"
            )
        return stored
    if not tagged:
        raise CheckpointFormatError(
            "it carries no integrity tag, and this server has a checkpoint secret"
        )
    tag, data = stored[len(MAGIC) : len(MAGIC) + TAG_BYTES], stored[len(MAGIC) + TAG_BYTES :]
    if not hmac.compare_digest(tag, _tag(key, edge_id, session_id, data)):
        raise CheckpointFormatError(
            "its integrity tag does not match (another secret, another slot, or changed)"
        )
    return data
