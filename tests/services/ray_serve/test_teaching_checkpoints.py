"""A teaching replica refuses a checkpoint that is not its slot's, and the edge is told to start afresh.

The replica's runtime is a stand-in holding what ``_session`` uses (the algorithm parameters, a
distiller factory and a thread pool): the real one loads a teacher and needs a Ray Serve replica.
The store, the checkpoints and their checks are the real ones."""

from __future__ import annotations

import asyncio
import dataclasses
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

pytest.importorskip("ray", reason="the serve extra is not installed (pip install 'shadowtutor[serve]')")

from services.checkpoints.checks import CheckpointFormatError  # noqa: E402
from services.checkpoints.seal import seal, unseal  # noqa: E402
from services.checkpoints.session import header, snapshot  # noqa: E402
from services.checkpoints.store import DirectoryStore  # noqa: E402
from services.checkpoints.writer import CheckpointWriter  # noqa: E402
from services.ray_serve import teaching  # noqa: E402
from services.ray_serve.client import ServeTeaching  # noqa: E402
from services.ray_serve.requests import OpenSession, ResumeSession, SessionRef  # noqa: E402
from services.ray_serve.slots import SlotTable  # noqa: E402
from services.ray_serve.teaching import TeachingReplica, _error, _Slot  # noqa: E402
from services.server.settings import ServerSettings  # noqa: E402
from services.server.teaching.local import LocalTeaching, SessionEnded  # noqa: E402
from services.server.teaching.session import EdgeSession, Traffic  # noqa: E402
from shadowtutor.algorithms.sparse_options import SparseOptions  # noqa: E402
from shadowtutor.protocol.agreement import Agreement  # noqa: E402
from shadowtutor.protocol.errors import ErrorCode, ProtocolError  # noqa: E402
from shadowtutor.protocol.messages import Error, Hello, Welcome  # noqa: E402
from tests.services.checkpoints.test_session import PARAMS, new_distiller  # noqa: E402
from tests.support.scene import CLASS_NAMES, make_frames  # noqa: E402
from tests.support.sessions import distill  # noqa: E402


def _replica(store: DirectoryStore, pool: ThreadPoolExecutor) -> TeachingReplica:
    replica = object.__new__(TeachingReplica)
    replica.settings = ServerSettings()
    replica.store = store
    replica.runtime = SimpleNamespace(params=PARAMS, new_distiller=new_distiller, distill_pool=pool)
    replica.teaching = LocalTeaching(replica.runtime)
    return replica


def _checkpoint_of(edge_id: str) -> tuple[str, bytes]:
    hello = Hello(edge_id=edge_id, class_names=list(CLASS_NAMES), frame_width=64, frame_height=48)
    session = EdgeSession(
        hello=hello,
        agreement=Agreement(frame_codec="raw", weight_codec="f32"),
        params=PARAMS,
        traffic=Traffic(),
        distiller=new_distiller(None),
    )
    session.welcome()
    return session.session_id, snapshot(session)


def test_another_edges_checkpoint_in_the_slot_ends_the_session_with_a_fatal_error(tmp_path: Path) -> None:
    store = DirectoryStore(tmp_path)
    own_session, _ = _checkpoint_of("cam-1")
    _, others = _checkpoint_of("cam-2")
    store.create("cam-1", own_session, 0, others)  # cam-2's state put in cam-1's slot
    with ThreadPoolExecutor(1) as pool:
        replica = _replica(store, pool)
        slot = _Slot("cam-1")
        with pytest.raises(SessionEnded, match="checkpoint is refused .*of edge 'cam-2'") as ended:
            asyncio.run(replica._session(slot, SessionRef(own_session, 0), None))
    assert slot.session is None
    error = _error(ended.value, 7)
    assert (error.fatal, error.code, error.seq) == (True, ErrorCode.INTERNAL.value, 7)
    assert "starts fresh" in error.message


def test_its_own_checkpoint_is_restored(tmp_path: Path) -> None:
    store = DirectoryStore(tmp_path)
    session_id, data = _checkpoint_of("cam-1")
    store.create("cam-1", session_id, 0, data)
    with ThreadPoolExecutor(1) as pool:
        slot = _Slot("cam-1")
        session = asyncio.run(_replica(store, pool)._session(slot, SessionRef(session_id, 0), None))
    assert session.session_id == session_id and session.hello.edge_id == "cam-1"


def test_a_checkpoint_behind_the_edge_is_taken_and_the_next_update_is_full(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The replica that answered version 2 died before writing its checkpoint: the store holds version 1. The
    session goes on from version 1 (after waiting for a newer one a while), numbers on from the edge's
    version 2, and sends full weights, as it no longer knows what the edge holds."""
    monkeypatch.setattr(teaching, "CHECKPOINT_LAG_SECONDS", 0.3)
    frames, labels = make_frames(3)
    hello = Hello(edge_id="cam-1", class_names=list(CLASS_NAMES), frame_width=64, frame_height=48)
    original = EdgeSession(
        hello=hello,
        agreement=Agreement(frame_codec="raw", weight_codec="f32", delta_codec="q8delta+zstd"),
        params=PARAMS,
        traffic=Traffic(),
        distiller=new_distiller(None),
    )
    original.welcome()
    distill(original, 0, frames[0], labels[0], base_version=0, teacher_ms=1.0)
    store = DirectoryStore(tmp_path)
    store.create("cam-1", original.session_id, 1, snapshot(original))
    distill(original, 1, frames[1], labels[1], base_version=1, teacher_ms=1.0)  # version 2, never stored
    with ThreadPoolExecutor(1) as pool:
        slot = _Slot("cam-1")
        start = time.monotonic()
        session = asyncio.run(_replica(store, pool)._session(slot, SessionRef(original.session_id, 2), 2))
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
    monkeypatch.setattr(teaching, "CHECKPOINT_LAG_SECONDS", 0.3)
    store = _SlowStore(tmp_path)
    hello = Hello(edge_id="cam-1", class_names=list(CLASS_NAMES), frame_width=64, frame_height=48)
    session = EdgeSession(
        hello=hello,
        agreement=Agreement(frame_codec="raw", weight_codec="f32"),
        params=PARAMS,
        traffic=Traffic(),
        distiller=new_distiller(None),
    )
    welcome = session.welcome()
    with ThreadPoolExecutor(1) as pool:
        replica = _replica(store, pool)
        replica.writer = CheckpointWriter(store).start()
        slot = _Slot("cam-1")

        async def answer() -> tuple[bool, float]:
            start = time.monotonic()
            claimed = await replica._checkpoint(slot, session, welcome, None)
            return claimed, time.monotonic() - start

        claimed, seconds = asyncio.run(answer())
        assert claimed and seconds < 5.0 and store.load("cam-1", session.session_id) is None
        assert slot.session is session
        store.release.set()
        assert replica.writer.close()
        assert header(store.load("cam-1", session.session_id))["version"] == 0
        # another replica answered the next version first: this one must not answer with its own
        replica.writer = CheckpointWriter(store).start()
        session.version = 1
        assert store.claim("cam-1", session.session_id, 1)
        store.create("cam-1", session.session_id, 1, snapshot(session))
        assert not asyncio.run(replica._checkpoint(slot, session, welcome, None))
        assert slot.session is None
        # a claim whose checkpoint never comes (its replica died): after a while this replica stores its own
        session.version = 2
        assert store.claim("cam-1", session.session_id, 2)
        assert asyncio.run(replica._checkpoint(slot, session, welcome, None)) and slot.session is session
        assert replica.writer.close()
        assert store.latest("cam-1", session.session_id) == 2


def _journaled(replica: TeachingReplica, updates: int, check: bool = False) -> tuple[EdgeSession, _Slot]:
    """A delta-codec session of cam-1 opened and trained on ``updates`` key frames through ``replica``'s
    ``_checkpoint`` (``check``: each UPDATE's entry is in the store when it returns, before the answer)."""
    frames, labels = make_frames(updates)
    hello = Hello(edge_id="cam-1", class_names=list(CLASS_NAMES), frame_width=64, frame_height=48)
    session = EdgeSession(
        hello=hello,
        agreement=Agreement(frame_codec="raw", weight_codec="f32", delta_codec="q8delta+zstd"),
        params=PARAMS,
        traffic=Traffic(),
        distiller=new_distiller(None),
    )
    slot = _Slot("cam-1")
    assert asyncio.run(replica._checkpoint(slot, session, session.welcome(), None))
    for seq in range(updates):
        update = distill(session, seq, frames[seq], labels[seq], base_version=seq, teacher_ms=1.0)
        assert asyncio.run(replica._checkpoint(slot, session, update, seq))
        assert not check or replica.store.latest("cam-1", session.session_id) == seq + 1
    assert replica.writer.close()
    return session, slot


def test_updates_are_journaled_before_the_answer_and_a_takeover_resumes_at_the_edges_version(
    tmp_path: Path,
) -> None:
    """With a snapshot every 3 versions, each UPDATE's journal entry is in the store when
    ``_checkpoint`` returns (before the answer leaves). Another replica rebuilds the session at the
    newest version from the snapshot and the entries, and its next update is a delta, not full weights."""
    store = DirectoryStore(tmp_path)
    with ThreadPoolExecutor(1) as pool:
        replica = _replica(store, pool)
        replica.settings = ServerSettings(checkpoint_every=3, checkpoint_secret="a checkpoint secret")
        replica.writer = CheckpointWriter(store).start()
        session, slot = _journaled(replica, 5, check=True)
        assert slot.checkpoint is not None and slot.checkpoint[1] > 0
        folder = next(tmp_path.iterdir())
        kinds = sorted(p.name.rpartition("-")[2] for p in folder.iterdir() if not p.name.endswith(".claim"))
        # snapshots of the WELCOME and of version 3; entries of the versions after the older one kept
        assert kinds == ["000000000000.ckpt", "000000000001.jrnl", "000000000002.jrnl", "000000000003.ckpt",
                         "000000000003.jrnl", "000000000004.jrnl", "000000000005.jrnl"]
        other = _replica(store, pool)
        other.settings = replica.settings
        taken = _Slot("cam-1")
        copy = asyncio.run(other._session(taken, SessionRef(session.session_id, 5), None))
    assert (copy.version, taken.snapshot_version, taken.reply_seq, taken.moved) == (5, 3, 4, True)
    for key, value in copy.encoder.held.state.items():
        assert torch.equal(session.encoder.held.state[key], value), key
    frames, labels = make_frames(7)
    following = distill(copy, 5, frames[5], labels[5], base_version=5, teacher_ms=1.0)
    assert (following.version, following.full) == (6, False)


def test_a_session_is_resumed_only_at_the_edges_version_under_the_same_agreement(tmp_path: Path) -> None:
    """A reconnect through another ingress replica: the replica rebuilds the session from the store and
    WELCOMEs it back without weights where the edge's version and codecs match; else a non-fatal
    ERROR says why (the ingress opens a new session)."""
    store = DirectoryStore(tmp_path)
    with ThreadPoolExecutor(1) as pool:
        replica = _replica(store, pool)
        replica.writer = CheckpointWriter(store).start()
        session, _ = _journaled(replica, 2)
        hello = session.hello

        def resume(edge: str, version: int, delta_codec: str | None = "q8delta+zstd") -> object:
            agreement = Agreement(frame_codec="raw", weight_codec="f32", delta_codec=delta_codec)
            request = ResumeSession(hello=dataclasses.replace(hello, edge_id=edge),
                                    session=SessionRef(session.session_id, version), agreement=agreement,
                                    telemetry_interval=None)
            return asyncio.run(_replica(store, pool)._resumed(_Slot(edge), request))

        resumed = resume("cam-1", 2)
        assert isinstance(resumed, Welcome) and resumed.resumed and resumed.tensors == [] and not resumed.payload
        assert (resumed.session_id, resumed.version, resumed.delta_codec) == (session.session_id, 2, "q8delta+zstd")
        for answer, why in ((resume("cam-1", 2, delta_codec=None), "other codecs"),
                            (resume("cam-2", 2), "no checkpoint of this session"),
                            (resume("cam-1", 5), "older version of the session than the edge's 5")):
            assert isinstance(answer, Error) and not answer.fatal and why in answer.message, answer
        # the edge never got version 2 (its ingress died with the answer): resumed at 1, version 2 dropped
        resumed = resume("cam-1", 1)
        assert isinstance(resumed, Welcome) and resumed.version == 1
        assert store.latest("cam-1", session.session_id) == 1


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
        slot = _Slot("cam-1")
        with pytest.raises(SessionEnded, match="no integrity tag"):
            asyncio.run(replica._session(slot, SessionRef(session_id, 0), None))


def unseal_error(stored: bytes, key: bytes | None, edge_id: str, session_id: str) -> str:
    with pytest.raises(CheckpointFormatError) as refused:
        unseal(stored, key, edge_id, session_id)
    return str(refused.value)


def test_a_session_opened_on_a_replica_trains_the_servers_sparse_share(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the replica's Serve plumbing (its multiplexed slot and model id) is stood in: it needs a Serve replica
    slot = _Slot("cam-1")

    async def the_slot(edge_id: str) -> _Slot:
        return slot

    monkeypatch.setattr(teaching.serve, "get_multiplexed_model_id", lambda: "cam-1")
    hello = Hello(edge_id="cam-1", class_names=list(CLASS_NAMES), frame_width=64, frame_height=48)
    agreement = Agreement(frame_codec="raw", weight_codec="f32", delta_codec="q4sparse+zstd")
    request = OpenSession(hello=hello, session_id="s-1", agreement=agreement, telemetry_interval=None)
    with ThreadPoolExecutor(1) as pool:
        replica = _replica(DirectoryStore(tmp_path), pool)
        replica.settings = ServerSettings(sparse_fraction=0.05, sparse_every=3)
        replica._started, replica._slot = True, the_slot
        replica._slots, replica.replica_id = SlotTable(1, _Slot), "replica-1"
        replica.name = "replica-1"
        replica.writer = CheckpointWriter(replica.store).start()
        asyncio.run(replica.open(request))
        assert replica.writer.close()
    assert slot.session is not None and slot.session.distiller is not None
    chooser = slot.session.distiller.chooser
    assert chooser is not None and chooser.options == SparseOptions(0.05, 3)
