"""A teaching replica's answers around its checkpoints: a refused checkpoint ends the session with a
fatal ERROR, a session is resumed only at the edge's version under the same agreement, and a
session opened on a replica trains the server's sparse share.

The replica is built around stand-ins for what needs a Ray Serve replica and a teacher: its
teaching is a real ``LocalTeaching`` with no models loaded, whose students come from the test's
distiller factory, and Serve's multiplexed model id is set by the test. The keeper, the store and
the checkpoints are the real ones."""

from __future__ import annotations

import asyncio
import dataclasses
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

pytest.importorskip("ray", reason="the serve extra is not installed (pip install 'shadowtutor[serve]')")

from services.checkpoints.keeper import SessionRef, Slot  # noqa: E402
from services.checkpoints.store import DirectoryStore  # noqa: E402
from services.checkpoints.writer import CheckpointWriter  # noqa: E402
from services.ray_serve import teaching  # noqa: E402
from services.ray_serve.client import ServeTeaching  # noqa: E402
from services.ray_serve.requests import OpenSession, ResumeSession  # noqa: E402
from services.ray_serve.slots import SlotTable  # noqa: E402
from services.ray_serve.teaching import TeachingReplica, _error  # noqa: E402
from services.server.metrics.server_metrics import ServerMetrics  # noqa: E402
from services.server.settings import ServerSettings  # noqa: E402
from services.server.teaching.local import LocalTeaching, SessionEnded  # noqa: E402
from shadowtutor.algorithms.sparse_options import SparseOptions  # noqa: E402
from shadowtutor.protocol.agreement import Agreement  # noqa: E402
from shadowtutor.protocol.errors import ErrorCode, ProtocolError  # noqa: E402
from shadowtutor.protocol.messages import Error, Hello, Welcome  # noqa: E402
from tests.services.checkpoints.test_keeper import journaled, keeper_of  # noqa: E402
from tests.services.checkpoints.test_session import new_distiller  # noqa: E402
from tests.support.scene import CLASS_NAMES  # noqa: E402


def _replica(
    store: DirectoryStore, pool: ThreadPoolExecutor, settings: ServerSettings | None = None
) -> TeachingReplica:
    """A replica with the stand-in teaching, one slot, and a keeper of ``store``."""
    settings = settings or ServerSettings()
    replica = object.__new__(TeachingReplica)
    replica.settings = settings
    replica.teaching = LocalTeaching(settings, ServerMetrics())
    replica.teaching.new_distiller = new_distiller  # type: ignore[method-assign]
    replica.keeper = keeper_of(store, pool, settings)
    replica._slots, replica.replica_id, replica.name = SlotTable(1, Slot), "replica-1", "replica-1"
    return replica


def test_a_session_the_teaching_cannot_go_on_with_is_a_fatal_error() -> None:
    error = _error(SessionEnded(ErrorCode.INTERNAL, "this session's checkpoint is refused"), 7)
    assert (error.fatal, error.code, error.seq) == (True, ErrorCode.INTERNAL.value, 7)
    once = _error(ProtocolError(ErrorCode.TEACHER_FAILED, "out of memory"), 8)
    assert (once.fatal, once.code, once.seq) == (False, ErrorCode.TEACHER_FAILED.value, 8)


def test_a_session_is_resumed_only_at_the_edges_version_under_the_same_agreement(tmp_path: Path) -> None:
    """A reconnect through another ingress replica: the replica rebuilds the session from the store and
    WELCOMEs it back without weights where the edge's version and codecs match; else a non-fatal
    ERROR says why (the ingress opens a new session)."""
    store = DirectoryStore(tmp_path)
    with ThreadPoolExecutor(1) as pool:
        keeper = keeper_of(store, pool)
        keeper.writer = CheckpointWriter(store).start()
        session, _ = journaled(keeper, 2)
        hello = session.hello

        def resume(edge: str, version: int, delta_codec: str | None = "q8delta+zstd") -> object:
            agreement = Agreement(frame_codec="raw", weight_codec="f32", delta_codec=delta_codec)
            request = ResumeSession(hello=dataclasses.replace(hello, edge_id=edge),
                                    session=SessionRef(session.session_id, version), agreement=agreement,
                                    telemetry_interval=None)
            return asyncio.run(_replica(store, pool)._resumed(Slot(edge), request))

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


def test_a_session_opened_on_a_replica_trains_the_servers_sparse_share(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(teaching.serve, "get_multiplexed_model_id", lambda: "cam-1")
    hello = Hello(edge_id="cam-1", class_names=list(CLASS_NAMES), frame_width=64, frame_height=48)
    agreement = Agreement(frame_codec="raw", weight_codec="f32", delta_codec="q4sparse+zstd")
    request = OpenSession(hello=hello, session_id="s-1", agreement=agreement, telemetry_interval=None)
    store = DirectoryStore(tmp_path)
    with ThreadPoolExecutor(1) as pool:
        replica = _replica(store, pool, ServerSettings(sparse_fraction=0.05, sparse_every=3, sparse_choice="gradient"))
        replica.keeper.writer = CheckpointWriter(store).start()
        asyncio.run(replica.open(request))
        assert replica.keeper.close()
        asyncio.run(replica.teaching.stop())
    slot = replica._slots.take("cam-1")
    assert slot.session is not None and slot.session.distiller is not None
    chooser = slot.session.distiller.chooser
    assert chooser is not None and chooser.options == SparseOptions(0.05, 3, "gradient")
