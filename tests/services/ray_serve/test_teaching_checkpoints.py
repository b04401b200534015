"""A teaching replica refuses a checkpoint that is not its slot's, and the edge is told to start afresh.

The replica's runtime is a stand-in holding what ``_session`` uses (the algorithm parameters, a
distiller factory and a thread pool): the real one loads a teacher and needs a Ray Serve replica.
The store, the checkpoints and their checks are the real ones."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace

import pytest

pytest.importorskip("ray", reason="the serve extra is not installed (pip install 'shadowtutor[serve]')")

from services.ray_serve.client import ServeTeaching  # noqa: E402
from services.ray_serve.requests import SessionRef  # noqa: E402
from services.ray_serve.teaching import TeachingReplica, _error, _Slot  # noqa: E402
from services.server.checkpoint_checks import CheckpointFormatError  # noqa: E402
from services.server.checkpoint_seal import seal, unseal  # noqa: E402
from services.server.checkpoint_store import DirectoryStore  # noqa: E402
from services.server.session import EdgeSession, Traffic  # noqa: E402
from services.server.session_checkpoint import snapshot  # noqa: E402
from services.server.settings import ServerSettings  # noqa: E402
from services.server.teaching import SessionEnded  # noqa: E402
from shadowtutor.protocol.errors import ErrorCode, ProtocolError  # noqa: E402
from shadowtutor.protocol.messages import Error, Hello  # noqa: E402
from tests.services.server.test_session_checkpoint import PARAMS, new_distiller  # noqa: E402
from tests.support.scene import CLASS_NAMES  # noqa: E402


def _replica(store: DirectoryStore, pool: ThreadPoolExecutor) -> TeachingReplica:
    replica = object.__new__(TeachingReplica)
    replica.settings = ServerSettings()
    replica.store = store
    replica.runtime = SimpleNamespace(params=PARAMS, new_distiller=new_distiller, distill_pool=pool)
    return replica


def _checkpoint_of(edge_id: str) -> tuple[str, bytes]:
    hello = Hello(edge_id=edge_id, class_names=list(CLASS_NAMES), frame_width=64, frame_height=48)
    session = EdgeSession(hello, "raw", "f32", PARAMS, Traffic(), new_distiller(None))
    session.welcome()
    return session.session_id, snapshot(session)


def test_another_edges_checkpoint_in_the_slot_ends_the_session_with_a_fatal_error(tmp_path: Path) -> None:
    store = DirectoryStore(tmp_path)
    own_session, _ = _checkpoint_of("cam-1")
    _, others = _checkpoint_of("cam-2")
    store.create("cam-1", own_session, 0, others)  # cam-2's state put in cam-1's slot
    with ThreadPoolExecutor(1) as pool:
        replica = _replica(store, pool)
        slot = _Slot("cam-1", lambda: None)
        with pytest.raises(SessionEnded, match="checkpoint is refused .*of edge 'cam-2'") as ended:
            asyncio.run(replica._session(slot, SessionRef(own_session, 0), None))
        slot.dropped = True
    assert slot.session is None
    error = _error(ended.value, 7)
    assert (error.fatal, error.code, error.seq) == (True, ErrorCode.INTERNAL.value, 7)
    assert "starts fresh" in error.message


def test_its_own_checkpoint_is_restored(tmp_path: Path) -> None:
    store = DirectoryStore(tmp_path)
    session_id, data = _checkpoint_of("cam-1")
    store.create("cam-1", session_id, 0, data)
    with ThreadPoolExecutor(1) as pool:
        slot = _Slot("cam-1", lambda: None)
        session = asyncio.run(_replica(store, pool)._session(slot, SessionRef(session_id, 0), None))
        slot.dropped = True
    assert session.session_id == session_id and session.hello.edge_id == "cam-1"


def test_the_ingress_ends_the_connection_only_for_a_fatal_answer() -> None:
    with pytest.raises(SessionEnded):
        ServeTeaching._checked(Error(code="internal", message="refused", fatal=True))
    with pytest.raises(ProtocolError) as plain:
        ServeTeaching._checked(Error(code="internal", message="once", fatal=False))
    assert not isinstance(plain.value, SessionEnded)


def test_with_a_secret_only_checkpoints_tagged_for_the_slot_are_used(tmp_path: Path) -> None:
    key = b"a checkpoint secret"
    session_id, data = _checkpoint_of("cam-1")
    assert unseal(seal(data, key, "cam-1", session_id), key, "cam-1", session_id) == data
    assert unseal(data, None, "cam-1", session_id) == data
    refusals = [
        ("no integrity tag", unseal_error(data, key, "cam-1", session_id)),
        ("does not match", unseal_error(seal(data, b"another secret!!", "cam-1", session_id), key, "cam-1",
                                        session_id)),
        ("does not match", unseal_error(seal(data, key, "cam-2", session_id), key, "cam-1", session_id)),
        ("no checkpoint secret", unseal_error(seal(data, key, "cam-1", session_id), None, "cam-1", session_id)),
    ]
    for expected, message in refusals:
        assert expected in message
    changed = bytearray(seal(data, key, "cam-1", session_id))
    changed[-100] ^= 1
    assert "does not match" in unseal_error(bytes(changed), key, "cam-1", session_id)
    store = DirectoryStore(tmp_path)
    store.create("cam-1", session_id, 0, data)  # untagged, on a replica with a secret
    with ThreadPoolExecutor(1) as pool:
        replica = _replica(store, pool)
        replica.settings = ServerSettings(checkpoint_secret="a checkpoint secret")
        slot = _Slot("cam-1", lambda: None)
        with pytest.raises(SessionEnded, match="no integrity tag"):
            asyncio.run(replica._session(slot, SessionRef(session_id, 0), None))
        slot.dropped = True


def unseal_error(stored: bytes, key: bytes | None, edge_id: str, session_id: str) -> str:
    with pytest.raises(CheckpointFormatError) as refused:
        unseal(stored, key, edge_id, session_id)
    return str(refused.value)
