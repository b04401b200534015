"""The teaching deployment's replica: the teacher, the distillation engine and the students of its
edges.

Sessions are Serve multiplexed models keyed by edge id: the ingress sends every request of an
edge with ``multiplexed_model_id=edge_id``, so Serve routes it to the replica that holds that
edge's student (a new edge goes to a replica with the fewest). A replica holds at most
``students`` students (``--ray-replica-sessions``, default ``max_sessions``); the least recently
used one is dropped past that.

Every change to a session (its WELCOME, each UPDATE) is checkpointed to the store before the
answer leaves (``services.server.session_checkpoint``), as a new version that only its first
writer stores: a replica that lost that race (both answered a request sent again) answers with
the winner's checkpoint instead of its own. A replica that gets a request for a
session it does not hold, or holds at another version than the one the ingress last sent,
rebuilds it from the checkpoint: that is how a session survives its replica's death, an
eviction, or a move to another replica. A retried key frame whose answer is in the checkpoint
is answered from there, not trained again.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ray import serve

from services.ray_serve import logs
from services.ray_serve.requests import (
    Answer,
    LabelKeyFrame,
    OpenSession,
    Resync,
    SessionRef,
    TrainKeyFrame,
)
from services.server.checkpoint_seal import seal, unseal
from services.server.checkpoint_store import open_store
from services.server.loading import load_models
from services.server.metrics import ServerMetrics
from services.server.remote_teaching import SessionEnded
from services.server.runtime import ServerRuntime
from services.server.session import EdgeSession, Traffic
from services.server.session_checkpoint import CheckpointFormatError, restore, snapshot
from services.server.settings import ServerSettings
from services.server.teacher_queue import TeacherFailed
from shadowtutor.algorithms.distill import DistillResult
from shadowtutor.heap import freeze_startup_heap
from shadowtutor.protocol.codecs import encode_labels
from shadowtutor.protocol.errors import ErrorCode, ProtocolError
from shadowtutor.protocol.messages import Error, Labels, Message

log = logging.getLogger(__name__)


@dataclass
class _Slot:
    """One edge's place on this replica: its session (None until built) and the last answer sent;
    ``on_drop`` runs once when Serve drops the slot (or it is collected)."""

    edge_id: str
    on_drop: Callable[[], None]
    session: EdgeSession | None = None
    reply: Message | None = None
    reply_seq: int | None = None
    # rebuilt from its checkpoint for the request being answered
    moved: bool = False
    # (seconds, bytes) of the checkpoint written for it
    checkpoint: tuple[float, int] | None = None
    dropped: bool = False

    def __del__(self) -> None:
        if not self.dropped:
            self.dropped = True
            self.on_drop()


def _error(exc: ProtocolError, seq: int | None) -> Error:
    """The ERROR answering ``exc``: fatal for :class:`SessionEnded`, else for this request only."""
    return Error(
        code=exc.code.value, message=exc.message, fatal=isinstance(exc, SessionEnded), seq=seq
    )


def teaching_settings(settings: ServerSettings) -> ServerSettings:
    """``settings`` for a teaching replica: no tokens and no TLS (edges never reach it; the ingress
    does)."""
    return settings.model_copy(
        update={
            "tokens_file": None,
            "tokens": None,
            "protect_metrics": False,
            "tls_cert": None,
            "tls_key": None,
            "tls_client_ca": None,
        }
    )


class TeachingReplica:
    """Loads the models at construction (a replica that cannot load them fails to start, and Serve
    says why)."""

    def __init__(self, settings: ServerSettings, store: str, students: int | None = None) -> None:
        """``students``: the most students held here (default ``settings.max_sessions``)."""
        logs.configure(settings.log_level)
        self.settings = teaching_settings(settings)
        self.store = open_store(store)
        self._models = load_models(self.settings)
        self.runtime = ServerRuntime(self.settings, ServerMetrics(1, 60.0))
        freeze_startup_heap()
        self._started = False
        # slots handed out by the multiplexed loader and not dropped yet
        self._held = 0

        self.name = f"{socket.gethostname()}:{os.getpid()}"

        async def new_slot(edge_id: str) -> _Slot:
            self._held += 1
            return _Slot(edge_id, self._dropped)

        # at most `students` here; Serve drops the least recently used past that
        held = self.settings.max_sessions if students is None else students
        self._slot = serve.multiplexed(max_num_models_per_replica=held)(new_slot)

    def _start(self) -> ServerRuntime:
        # the engine's tasks belong to the replica's event loop
        if not self._started:
            self.runtime.install(self._models)
            self._started = True
        return self.runtime

    async def describe(self) -> dict[str, Any]:
        readiness = self._start().readiness()
        return {
            "class_names": readiness["class_names"],
            "teacher": readiness["teacher"],
            "where": f"Ray Serve ({readiness['device']} teaching replicas)",
        }

    def _dropped(self) -> None:
        self._held -= 1

    def _answer(self, message: Message, slot: _Slot | None = None) -> Answer:
        """``message`` with this replica's news for the ingress's metrics (the slot's move and
        checkpoint, once)."""
        moved, checkpoint = (slot.moved, slot.checkpoint) if slot is not None else (False, None)
        if slot is not None:
            slot.moved, slot.checkpoint = False, None
        seconds, size = checkpoint if checkpoint is not None else (None, None)
        return Answer(message, self.name, self._held, moved, seconds, size)

    async def open(self, request: OpenSession) -> Answer:
        runtime = self._start()
        slot = await self._slot(serve.get_multiplexed_model_id())
        distiller = await self._in_pool(runtime.new_distiller, request.student_size)
        session = EdgeSession(
            hello=request.hello,
            frame_codec=request.frame_codec,
            weight_codec=request.weight_codec,
            params=runtime.params,
            traffic=Traffic(),
            distiller=distiller,
            delta_codec=request.delta_codec,
            telemetry_interval=request.telemetry_interval,
            session_id=request.session_id,
        )
        welcome = await self._in_pool(session.welcome)
        # opened already (this request sent again):
        if not await self._checkpoint(slot, session, None, None):
            # that session
            session = await self._session(slot, SessionRef(request.session_id, 0), None)
            # the same weights, so the same WELCOME
            welcome = await self._in_pool(session.welcome)
        await asyncio.to_thread(self.store.forget_others, slot.edge_id, request.session_id)
        return self._answer(welcome, slot)

    async def train(self, request: TrainKeyFrame) -> Answer:
        runtime = self._start()
        slot = await self._slot(serve.get_multiplexed_model_id())
        try:
            session = await self._session(slot, request.session, request.seq)
            if slot.reply_seq == request.seq and slot.reply is not None:
                # answered before, the answer lost on its way: again
                return self._answer(slot.reply, slot)
            queue = runtime.teacher_queue
            if queue is None:
                raise TeacherFailed("the teacher is not available (the replica is shutting down)")
            labelled = await queue.label(request.frame, request.frame_index)
            distillation = runtime.distillation
            if distillation is None:
                raise ProtocolError(
                    ErrorCode.SERVER_BUSY, "distillation is not available (the replica is stopping)"
                )
            assert session.distiller is not None, (
                "a teaching replica opens and restores sessions with a student"
            )
            session.last_seq = request.seq
            session.stats.labelled += 1
            result, seconds = await distillation.train(
                session.distiller, request.frame, labelled.labels, labelled.boxes
            )
            update = await self._in_pool(
                session.trained,
                request.seq,
                result,
                seconds,
                request.base_version,
                labelled.seconds * 1000.0,
            )
        except ProtocolError as exc:
            return self._answer(_error(exc, request.seq), slot)
        except TeacherFailed as exc:
            error = Error(
                code=ErrorCode.TEACHER_FAILED.value, message=str(exc), fatal=False, seq=request.seq
            )
            return self._answer(error, slot)
        # another replica may have answered it first
        if not await self._checkpoint(slot, session, update, request.seq, result):
            session = await self._session(slot, request.session, request.seq)
            if slot.reply_seq != request.seq or slot.reply is None:
                error = Error(
                    code=ErrorCode.INTERNAL.value,
                    message="another teaching replica changed this session meanwhile",
                    fatal=False,
                    seq=request.seq,
                )
                return self._answer(error, slot)
            update = slot.reply
        return self._answer(update, slot)

    async def resync(self, request: Resync) -> Answer:
        slot = await self._slot(serve.get_multiplexed_model_id())
        try:
            session = await self._session(slot, request.session, None)
        except ProtocolError as exc:
            return self._answer(_error(exc, None), slot)
        update = await self._in_pool(session.resync, request.have_version)
        if not await self._checkpoint(slot, session, None, None):
            return self._answer(
                Error(
                    code=ErrorCode.INTERNAL.value,
                    message="another teaching replica changed this session meanwhile; ask again",
                    fatal=False,
                ),
                slot,
            )
        return self._answer(update, slot)

    async def label(self, request: LabelKeyFrame) -> Answer:
        queue = self._start().teacher_queue
        try:
            if queue is None:
                raise TeacherFailed("the teacher is not available (the replica is shutting down)")
            labelled = await queue.label(request.frame, request.frame_index)
        except TeacherFailed as exc:
            return self._answer(
                Error(
                    code=ErrorCode.TEACHER_FAILED.value,
                    message=str(exc),
                    fatal=False,
                    seq=request.seq,
                )
            )
        payload = await asyncio.to_thread(encode_labels, labelled.labels, "png")
        height, width = request.frame.shape[:2]
        return self._answer(
            Labels(
                seq=request.seq,
                frame_index=request.frame_index,
                codec="png",
                width=width,
                height=height,
                teacher_ms=labelled.seconds * 1000.0,
                payload=payload,
            )
        )

    async def _session(self, slot: _Slot, ref: SessionRef, seq: int | None) -> EdgeSession:
        """The slot's session at the version the ingress knows (or one further, answered for
        ``seq``); rebuilt from the checkpoint when the slot holds none or another one."""
        held = slot.session
        if (
            held is not None
            and held.session_id == ref.session_id
            and (
                held.version == ref.version
                or (held.version == ref.version + 1 and slot.reply_seq == seq)
            )
        ):
            return held
        stored = await asyncio.to_thread(self.store.load, slot.edge_id, ref.session_id)
        if stored is None:
            raise ProtocolError(
                ErrorCode.INTERNAL, f"no checkpoint of this session in {self.store.location}"
            )
        settings = self.settings
        try:
            data = unseal(stored, settings.checkpoint_key(), slot.edge_id, ref.session_id)
            restored = await self._in_pool(
                functools.partial(
                    restore,
                    edge_id=slot.edge_id,
                    session_id=ref.session_id,
                    max_size=(settings.max_frame_width, settings.max_frame_height),
                ),
                data,
                self.runtime.params,
                self.runtime.new_distiller,
            )
        except CheckpointFormatError as exc:
            log.warning(
                "the checkpoint of session %s of edge %r is refused (%s); the edge is told to "
                "start a "
                "fresh session",
                ref.session_id,
                slot.edge_id,
                exc,
            )
            slot.session = None
            raise SessionEnded(
                ErrorCode.INTERNAL,
                f"this session's checkpoint is refused ({str(exc)[:200]}); reconnect: the "
                "next session starts fresh from the base student",
            ) from None
        session = restored.session
        if session.session_id != ref.session_id or session.version < ref.version:
            raise ProtocolError(
                ErrorCode.INTERNAL,
                f"the checkpoint holds session {session.session_id[:8]} at version "
                f"{session.version}, not {ref.session_id[:8]} at version {ref.version}",
            )
        slot.session, slot.reply, slot.reply_seq, slot.moved = (
            session,
            restored.reply,
            restored.reply_seq,
            True,
        )
        log.info(
            "session %s of edge %r rebuilt here from its checkpoint (version %d, saved %.1f s ago)",
            session.session_id,
            slot.edge_id,
            session.version,
            time.time() - restored.saved_at,
        )
        return session

    async def _checkpoint(
        self,
        slot: _Slot,
        session: EdgeSession,
        reply: Message | None,
        seq: int | None,
        trained: DistillResult | None = None,
    ) -> bool:
        """Checkpoint the session's new version (with ``reply``, the answer to ``seq``, and
        ``trained``, the training it reports, whose host copies are the state); False when another
        replica stored that version first: then the slot is emptied, and the caller answers from the
        store."""
        # off the distillation pool: no wait behind other sessions' training
        start = time.perf_counter()
        data = seal(
            await asyncio.to_thread(snapshot, session, reply, seq, trained),
            self.settings.checkpoint_key(),
            slot.edge_id,
            session.session_id,
        )
        if not await asyncio.to_thread(
            self.store.create, slot.edge_id, session.session_id, session.version, data
        ):
            log.warning(
                "version %d of session %s was stored by another replica first; answering with it",
                session.version,
                session.session_id,
            )
            slot.session = None
            return False
        slot.session, slot.reply, slot.reply_seq = session, reply, seq
        slot.checkpoint = (time.perf_counter() - start, len(data))
        return True

    async def _in_pool(self, fn: Any, *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(
            self.runtime.distill_pool, fn, *args
        )
