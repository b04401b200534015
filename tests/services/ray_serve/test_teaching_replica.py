"""The teaching replica's requests without a Ray cluster: the replica is built directly, with its real
models (the ``labels`` teacher on a tiny scene, a student checkpoint, CPU distillation), its real
checkpoint store and the real ``LocalTeaching``. Only Serve's multiplexing is replaced, since it
needs a Serve replica context: a plain loader hands each edge one slot, and the request's
multiplexed model id is set by the test."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip(
    "ray", reason="the serve extra is not installed (pip install 'shadowtutor[serve]')"
)

from services.checkpoints.session import header  # noqa: E402
from services.checkpoints.store import DirectoryStore  # noqa: E402
from services.ray_serve import teaching as teaching_module  # noqa: E402
from services.ray_serve.requests import (  # noqa: E402
    Answer,
    LabelKeyFrame,
    OpenSession,
    Resync,
    SessionRef,
    TrainKeyFrame,
)
from services.ray_serve.teaching import TeachingReplica  # noqa: E402
from services.server.settings import ServerSettings  # noqa: E402
from shadowtutor.protocol.agreement import Agreement  # noqa: E402
from shadowtutor.protocol.codecs import decode_labels  # noqa: E402
from shadowtutor.protocol.messages import Hello, Labels, Update, Welcome, encode  # noqa: E402
from tests.support.scene import TinyScene  # noqa: E402

EDGE = "cam-1"


@pytest.fixture
def edge_id(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The multiplexed model id of the request being served (what Serve gives a replica)."""
    current = [EDGE]
    monkeypatch.setattr(teaching_module.serve, "get_multiplexed_model_id", lambda: current[0])
    yield current


def replica(settings: ServerSettings, store: Path) -> TeachingReplica:
    """A replica as Serve builds it (its slots are its own table, so nothing of Serve is needed
    but the request's edge id, from the ``edge_id`` fixture)."""
    return TeachingReplica(settings, str(store), students=2)


async def stop(replica: TeachingReplica) -> None:
    """What Serve's shutdown of a replica ends: its models and its checkpoint writer."""
    await replica.teaching.stop()
    assert replica.keeper.close()


def open_request(scene: TinyScene, session_id: str = "s1") -> OpenSession:
    hello = Hello(
        edge_id=EDGE, class_names=list(scene.class_names), frame_width=64, frame_height=48
    )
    return OpenSession(
        hello=hello,
        session_id=session_id,
        agreement=Agreement(frame_codec="raw", weight_codec="f32"),
        telemetry_interval=None,
    )


def train(scene: TinyScene, seq: int, version: int) -> TrainKeyFrame:
    return TrainKeyFrame(
        session=SessionRef("s1", version),
        seq=seq,
        frame_index=seq,
        base_version=version,
        frame=scene.frames[seq].copy(),
    )


def test_a_session_opens_trains_answers_again_and_resyncs(
    settings: ServerSettings,
    scene: TinyScene,
    tmp_path: Path,
    edge_id: list[str],
) -> None:
    store = tmp_path / "store"

    async def scenario() -> list[Answer]:
        teaching = replica(settings, store)
        described = await teaching.describe()
        assert described.class_names == tuple(scene.class_names)
        assert described.where == "Ray Serve (cpu teaching replicas)"
        opened = await teaching.open(open_request(scene))
        first = await teaching.train(train(scene, 0, 0))
        again = await teaching.train(train(scene, 0, 0))  # sent again: answered from the slot
        resynced = await teaching.resync(Resync(SessionRef("s1", 1), have_version=0))
        labelled = await teaching.label(LabelKeyFrame(7, 3, scene.frames[3].copy()))
        await stop(teaching)
        return [opened, first, again, resynced, labelled]

    opened, first, again, resynced, labelled = asyncio.run(scenario())
    assert isinstance(opened.message, Welcome) and opened.message.tensors
    # checkpoints are written behind the answer: the WELCOME's goes out with the next answer
    assert opened.checkpoint_bytes is None and opened.sessions == 1
    assert first.checkpoint_bytes is not None
    update = first.message
    assert isinstance(update, Update) and (update.seq, update.version, update.full) == (0, 1, False)
    assert update.steps >= 1 and update.teacher_ms > 0.0
    assert encode(again.message) == encode(update) and again.checkpoint_bytes is None
    assert isinstance(resynced.message, Update) and (
        resynced.message.version,
        resynced.message.full,
    ) == (2, True)
    assert header(DirectoryStore(store).load(EDGE, "s1"))["version"] == 2
    labels = labelled.message
    assert isinstance(labels, Labels) and (labels.seq, labels.frame_index, labels.width) == (
        7,
        3,
        64,
    )
    decoded = decode_labels(labels.payload, labels.codec, labels.width, labels.height)
    assert (decoded == scene.labels[3]).all()  # the labels teacher answers with the scene's labels


def test_another_replica_rebuilds_the_session_from_its_checkpoint(
    settings: ServerSettings,
    scene: TinyScene,
    tmp_path: Path,
    edge_id: list[str],
) -> None:
    store = tmp_path / "store"

    async def scenario() -> tuple[Answer, Answer, Answer]:
        first = replica(settings, store)
        await first.open(open_request(scene))
        trained = await first.train(train(scene, 0, 0))
        second = replica(settings, store)  # the first one died: Serve routes the edge here
        moved = await second.train(train(scene, 1, 1))
        stale = await second.train(train(scene, 2, 5))  # a version no checkpoint holds
        for stopped in (first, second):
            await stop(stopped)
        return trained, moved, stale

    trained, moved, stale = asyncio.run(scenario())
    assert isinstance(trained.message, Update) and trained.message.version == 1
    assert moved.moved and isinstance(moved.message, Update)
    assert (moved.message.version, moved.message.full) == (2, False)
    # the edge holds a version no checkpoint holds (its last checkpoint lost with its replica):
    # training goes on from the stored one, and the update carries the full weights
    assert isinstance(stale.message, Update) and (stale.message.version, stale.message.full) == (6, True)


def test_a_fresh_replicas_first_request_may_be_a_resync(
    settings: ServerSettings,
    scene: TinyScene,
    tmp_path: Path,
    edge_id: list[str],
) -> None:
    """The edge's replica died after its first update and the edge asks for a resync: Serve routes
    it to a replica that has answered nothing yet, which rebuilds the session and answers with the
    full weights."""
    store = tmp_path / "store"

    async def scenario() -> tuple[Answer, Answer]:
        first = replica(settings, store)
        await first.open(open_request(scene))
        trained = await first.train(train(scene, 0, 0))
        await stop(first)
        fresh = replica(settings, store)
        resynced = await fresh.resync(Resync(SessionRef("s1", 1), have_version=0))
        await stop(fresh)
        return trained, resynced

    trained, resynced = asyncio.run(scenario())
    assert isinstance(trained.message, Update) and trained.message.version == 1
    assert resynced.moved and isinstance(resynced.message, Update), resynced.message
    assert (resynced.message.version, resynced.message.full) == (2, True)


def test_a_session_opens_under_the_agreement_the_ingress_sends(
    settings: ServerSettings,
    scene: TinyScene,
    tmp_path: Path,
    edge_id: list[str],
) -> None:
    """The replica's session runs under the agreement it is handed: its student size reaches the
    WELCOME (and so the edge)."""
    agreement = Agreement(frame_codec="raw", weight_codec="f32", student_size=(32, 24))

    async def scenario() -> Answer:
        teaching = replica(settings, tmp_path / "store")
        opened = await teaching.open(dataclasses.replace(open_request(scene), agreement=agreement))
        await stop(teaching)
        return opened

    welcome = asyncio.run(scenario()).message
    assert isinstance(welcome, Welcome) and welcome.student_size == [32, 24]
