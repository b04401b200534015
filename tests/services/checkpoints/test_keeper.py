"""The session keeper of a teaching replica: it rebuilds a slot's session from the store, refuses a
checkpoint that is not the slot's (the edge is told to start afresh), claims and stores each new
version, and writes snapshots behind the answers.

The teaching it rebuilds sessions on is a stand-in holding what the keeper uses (the algorithm
parameters, a distiller factory and a thread pool): the real one loads a teacher. The store, the
checkpoints, their checks and the writer are the real ones."""

from __future__ import annotations

import asyncio
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from services.checkpoints import keeper as keeper_module
from services.checkpoints.checks import CheckpointFormatError
from services.checkpoints.keeper import SessionKeeper, SessionRef, Slot
from services.checkpoints.seal import seal, unseal
from services.checkpoints.session import header, snapshot
from services.checkpoints.store import DirectoryStore
from services.checkpoints.writer import CheckpointWriter
from services.server.settings import ServerSettings
from services.server.teaching.local import SessionEnded
from services.server.teaching.session import EdgeSession, Traffic
from shadowtutor.protocol.agreement import Agreement
from shadowtutor.protocol.messages import Hello
from tests.services.checkpoints.test_session import PARAMS, new_distiller
from tests.support.scene import CLASS_NAMES, make_frames
from tests.support.sessions import distill


def keeper_of(
    store: DirectoryStore, pool: ThreadPoolExecutor, settings: ServerSettings | None = None
) -> SessionKeeper:
    """A keeper of ``store`` on the stand-in teaching; its writer is not started (a test that
    writes snapshots starts its own)."""
    students = SimpleNamespace(params=PARAMS, new_distiller=new_distiller, pool=pool)
    return SessionKeeper(
        store, writer=CheckpointWriter(store), settings=settings or ServerSettings(), students=students
    )


def _checkpoint_of(edge_id: str) -> tuple[str, bytes]:
    hello = Hello(edge_id=edge_id, class_names=list(CLASS_NAMES), frame_width=64, frame_height=48)
    session = EdgeSession(
        hello=hello, agreement=Agreement(frame_codec="raw", weight_codec="f32"), params=PARAMS, traffic=Traffic(),
        distiller=new_distiller(None),
    )
    session.welcome()
    return session.session_id, snapshot(session)


def test_another_edges_checkpoint_in_the_slot_ends_the_session(tmp_path: Path) -> None:
    store = DirectoryStore(tmp_path)
    own_session, _ = _checkpoint_of("cam-1")
    _, others = _checkpoint_of("cam-2")
    store.create("cam-1", own_session, 0, others)  # cam-2's state put in cam-1's slot
    with ThreadPoolExecutor(1) as pool:
        slot = Slot("cam-1")
        with pytest.raises(SessionEnded, match="checkpoint is refused .*of edge 'cam-2'") as ended:
            asyncio.run(keeper_of(store, pool).session(slot, SessionRef(own_session, 0)))
    assert slot.session is None and "starts fresh" in ended.value.message


def test_its_own_checkpoint_is_restored(tmp_path: Path) -> None:
    store = DirectoryStore(tmp_path)
    session_id, data = _checkpoint_of("cam-1")
    store.create("cam-1", session_id, 0, data)
    with ThreadPoolExecutor(1) as pool:
        slot = Slot("cam-1")
        session = asyncio.run(keeper_of(store, pool).session(slot, SessionRef(session_id, 0)))
    assert session.session_id == session_id and session.hello.edge_id == "cam-1"


def test_a_checkpoint_behind_the_edge_is_taken_and_the_next_update_is_full(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The replica that answered version 2 died before writing its checkpoint: the store holds version 1. The
    session goes on from version 1 (after waiting for a newer one a while), numbers on from the edge's
    version 2, and sends full weights, as it no longer knows what the edge holds."""
    monkeypatch.setattr(keeper_module, "CHECKPOINT_LAG_SECONDS", 0.3)
    frames, labels = make_frames(3)
    hello = Hello(edge_id="cam-1", class_names=list(CLASS_NAMES), frame_width=64, frame_height=48)
    original = EdgeSession(
        hello=hello, agreement=Agreement(frame_codec="raw", weight_codec="f32", delta_codec="q8delta+zstd"),
        params=PARAMS, traffic=Traffic(), distiller=new_distiller(None),
    )
    original.welcome()
    distill(original, 0, frames[0], labels[0], base_version=0, teacher_ms=1.0)
    store = DirectoryStore(tmp_path)
    store.create("cam-1", original.session_id, 1, snapshot(original))
    distill(original, 1, frames[1], labels[1], base_version=1, teacher_ms=1.0)  # version 2, never stored
    with ThreadPoolExecutor(1) as pool:
        slot = Slot("cam-1")
        start = time.monotonic()
        session = asyncio.run(keeper_of(store, pool).session(slot, SessionRef(original.session_id, 2), 2))
    assert time.monotonic() - start >= 0.3
    assert session.version == 2 and slot.moved
    update = distill(session, 2, frames[2], labels[2], base_version=2, teacher_ms=1.0)
    assert (update.version, update.full) == (3, True)
    following = distill(session, 2, frames[2], labels[2], base_version=3, teacher_ms=1.0)
    assert (following.version, following.full) == (4, False)


class _SlowStore(DirectoryStore):
    """The real directory store, whose writes wait for ``release`` (a slow shared file system)."""

    def __init__(self, directory: Path) -> None:
        super().__init__(directory)
        self.release = threading.Event()

    def create(self, edge_id: str, session_id: str, version: int, data: bytes) -> bool:
        self.release.wait(30)
        return super().create(edge_id, session_id, version, data)


def test_the_answer_does_not_wait_for_the_checkpoint_and_a_lost_claim_is_seen(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(keeper_module, "CHECKPOINT_LAG_SECONDS", 0.3)
    store = _SlowStore(tmp_path)
    hello = Hello(edge_id="cam-1", class_names=list(CLASS_NAMES), frame_width=64, frame_height=48)
    session = EdgeSession(
        hello=hello, agreement=Agreement(frame_codec="raw", weight_codec="f32"), params=PARAMS, traffic=Traffic(),
        distiller=new_distiller(None),
    )
    welcome = session.welcome()
    with ThreadPoolExecutor(1) as pool:
        keeper = keeper_of(store, pool)
        keeper.writer = CheckpointWriter(store).start()
        slot = Slot("cam-1")

        async def answer() -> tuple[bool, float]:
            start = time.monotonic()
            claimed = await keeper.keep(slot, session, welcome)
            return claimed, time.monotonic() - start

        claimed, seconds = asyncio.run(answer())
        assert claimed and seconds < 5.0 and store.load("cam-1", session.session_id) is None
        assert slot.session is session
        store.release.set()
        assert keeper.close()
        assert header(store.load("cam-1", session.session_id))["version"] == 0
        # another replica answered the next version first: this one must not answer with its own
        keeper.writer = CheckpointWriter(store).start()
        session.version = 1
        assert store.claim("cam-1", session.session_id, 1)
        store.create("cam-1", session.session_id, 1, snapshot(session))
        assert not asyncio.run(keeper.keep(slot, session, welcome))
        assert slot.session is None
        # a claim whose checkpoint never comes (its replica died): after a while this replica stores its own
        session.version = 2
        assert store.claim("cam-1", session.session_id, 2)
        assert asyncio.run(keeper.keep(slot, session, welcome)) and slot.session is session
        assert keeper.close()
        assert store.latest("cam-1", session.session_id) == 2


def journaled(keeper: SessionKeeper, updates: int, check: bool = False) -> tuple[EdgeSession, Slot]:
    """A delta-codec session of cam-1 opened and trained on ``updates`` key frames, each version kept
    by ``keeper`` (``check``: each UPDATE's entry is in the store when it returns, before the answer);
    the keeper's writer closed at the end."""
    frames, labels = make_frames(updates)
    hello = Hello(edge_id="cam-1", class_names=list(CLASS_NAMES), frame_width=64, frame_height=48)
    session = EdgeSession(
        hello=hello, agreement=Agreement(frame_codec="raw", weight_codec="f32", delta_codec="q8delta+zstd"),
        params=PARAMS, traffic=Traffic(), distiller=new_distiller(None),
    )
    slot = Slot("cam-1")
    assert asyncio.run(keeper.keep(slot, session, session.welcome()))
    for seq in range(updates):
        update = distill(session, seq, frames[seq], labels[seq], base_version=seq, teacher_ms=1.0)
        assert asyncio.run(keeper.keep(slot, session, update, seq))
        assert not check or keeper.store.latest("cam-1", session.session_id) == seq + 1
    assert keeper.close()
    return session, slot


def test_updates_are_journaled_before_the_answer_and_a_takeover_resumes_at_the_edges_version(
    tmp_path: Path,
) -> None:
    """With a snapshot every 3 versions, each UPDATE's journal entry is in the store when ``keep``
    returns (before the answer leaves). Another replica's keeper rebuilds the session at the newest
    version from the snapshot and the entries, and its next update is a delta, not full weights."""
    store = DirectoryStore(tmp_path)
    settings = ServerSettings(checkpoint_every=3, checkpoint_secret="a checkpoint secret")
    with ThreadPoolExecutor(1) as pool:
        keeper = keeper_of(store, pool, settings)
        keeper.writer = CheckpointWriter(store).start()
        session, slot = journaled(keeper, 5, check=True)
        assert slot.checkpoint is not None and slot.checkpoint[1] > 0
        folder = next(tmp_path.iterdir())
        kinds = sorted(p.name.rpartition("-")[2] for p in folder.iterdir() if not p.name.endswith(".claim"))
        # snapshots of the WELCOME and of version 3; entries of the versions after the older one kept
        assert kinds == ["000000000000.ckpt", "000000000001.jrnl", "000000000002.jrnl", "000000000003.ckpt",
                         "000000000003.jrnl", "000000000004.jrnl", "000000000005.jrnl"]
        taken = Slot("cam-1")
        copy = asyncio.run(keeper_of(store, pool, settings).session(taken, SessionRef(session.session_id, 5)))
    assert (copy.version, taken.snapshot_version, taken.reply_seq, taken.moved) == (5, 3, 4, True)
    for key, value in copy.encoder.held.state.items():
        assert torch.equal(session.encoder.held.state[key], value), key
    frames, labels = make_frames(7)
    following = distill(copy, 5, frames[5], labels[5], base_version=5, teacher_ms=1.0)
    assert (following.version, following.full) == (6, False)


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
        keeper = keeper_of(store, pool, ServerSettings(checkpoint_secret="a checkpoint secret"))
        with pytest.raises(SessionEnded, match="no integrity tag"):
            asyncio.run(keeper.session(Slot("cam-1"), SessionRef(session_id, 0)))


def unseal_error(stored: bytes, key: bytes | None, edge_id: str, session_id: str) -> str:
    with pytest.raises(CheckpointFormatError) as refused:
        unseal(stored, key, edge_id, session_id)
    return str(refused.value)
