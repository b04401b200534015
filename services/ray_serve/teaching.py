"""The teaching deployment's replica: the teacher, the distillation engine and the students of its
edges.

The ingress sends every request of an edge with ``multiplexed_model_id=edge_id``; the
deployment's request router (``services.ray_serve.placement``) sends it to the replica that holds
the edge's session, or moves it to a less loaded one, from what each replica reports holding
(:meth:`TeachingReplica.record_routing_stats`). A replica holds at most ``students`` sessions
(``--ray-replica-sessions``, default ``max_sessions``) in slots; the least recently used one is
dropped past that, and :meth:`TeachingReplica.release` drops one that moved away or ended.

A replica is its models (a :class:`~services.server.teaching.local.LocalTeaching`, installed when
it is built) and the keeper of its sessions' checkpoints
(:class:`~services.checkpoints.keeper.SessionKeeper`): each request takes the edge's session from
the keeper (which rebuilds it from the store where the slot does not hold it at the version the
ingress knows), does its model work on the teaching, and hands the new version to the keeper before
the answer leaves. A retried key frame whose answer is stored is answered from there, not trained
again.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import socket
from typing import Any

from ray import serve
from ray.serve.exceptions import RayServeException

from services.checkpoints.keeper import SessionKeeper, SessionRef, Slot
from services.ray_serve import logs
from services.ray_serve.requests import (
    Answer,
    LabelKeyFrame,
    OpenSession,
    ReleaseSlot,
    ResumeSession,
    Resync,
    TrainKeyFrame,
)
from services.ray_serve.rollout import live_settings
from services.ray_serve.slots import SlotTable
from services.server.metrics.server_metrics import ServerMetrics
from services.server.settings import ServerSettings
from services.server.teaching.description import Description
from services.server.teaching.loading import load_models
from services.server.teaching.local import LocalTeaching, SessionEnded
from services.server.teaching.session import EdgeSession, Traffic
from shadowtutor.heap import freeze_startup_heap
from shadowtutor.protocol.errors import ErrorCode, ProtocolError
from shadowtutor.protocol.messages import Error, Message, Update, Welcome

log = logging.getLogger(__name__)


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


def _replica_id(fallback: str) -> str:
    """Serve's unique id of the replica this runs in, or ``fallback`` when built outside a Serve
    deployment (a replica constructed directly, as in tests)."""
    try:
        return str(serve.get_replica_context().replica_id.unique_id)
    except RayServeException:
        return fallback


class TeachingReplica:
    """One replica of the teaching deployment: its models, the students of its edges (one slot per
    edge, placed by the deployment's request router) and their checkpoints. Each request's model
    work goes through its :class:`~services.server.teaching.local.LocalTeaching`, each session's
    versions through its :class:`~services.checkpoints.keeper.SessionKeeper`; every answer is an
    :class:`Answer` carrying the message the ingress forwards. Built in its event loop (Serve runs
    the constructor there) with its models loaded and at work: a replica that cannot load them
    fails to start, and Serve says why; one that starts answers any request first."""

    def __init__(self, settings: ServerSettings, store: str, students: int | None = None) -> None:
        """``students``: the most students held here (default ``settings.max_sessions``)."""
        logs.configure(settings.log_level)
        self.settings = teaching_settings(settings)
        self.teaching = LocalTeaching(self.settings, ServerMetrics(1, 60.0))
        self.keeper = SessionKeeper.open(store, self.settings, self.teaching)
        self.teaching.install(load_models(self.settings))
        freeze_startup_heap()

        self.name = f"{socket.gethostname()}:{os.getpid()}"
        self.replica_id = _replica_id(self.name)

        held = self.settings.max_sessions if students is None else students
        self._slots = SlotTable(held, Slot)

    async def describe(self) -> Description:
        described = self.teaching.description
        assert described is not None, "a replica installs its models when it is built"
        where = f"Ray Serve ({described.device} teaching replicas)"
        return dataclasses.replace(described, where=where)

    def reconfigure(self, config: dict[str, Any]) -> None:
        """Serve's in-place settings change (the deployment's ``user_config``, the settings of
        :data:`~services.ray_serve.rollout.LIVE_SETTINGS`): the log level, the snapshot interval
        from the next version on, and the checkpoints' time to live from the next sweep on (due
        within the new sweep period)."""
        self.settings = live_settings(self.settings, config)
        logs.configure(self.settings.log_level)
        self.keeper.reconfigure(self.settings)
        ttl = self.settings.checkpoint_ttl
        log.info(
            "settings in place: checkpoints every %d versions, kept %g s after a session's last "
            "activity, log level %s",
            self.settings.checkpoint_every,
            ttl,
            self.settings.log_level,
        )

    def _slot(self) -> Slot:
        """The slot of the edge this request is for (Serve's multiplexed model id)."""
        return self._slots.take(serve.get_multiplexed_model_id())

    def record_routing_stats(self) -> dict[str, dict[str, int]]:
        """What Serve polls for the request router: ``edges``, {edge id: version of its session here
        (-1: none built yet)} for every slot."""
        return {
            "edges": {
                slot.edge_id: -1 if slot.session is None else slot.session.version
                for slot in self._slots.slots()
            }
        }

    async def release(self, request: ReleaseSlot) -> bool:
        """Drop the edge's slot if ``request`` names this replica (its session moved away or ended);
        True when one was dropped."""
        if request.replica_id != self.replica_id:
            return False
        released = self._slots.release(request.edge_id)
        if released:
            log.info(
                "slot of edge %r released (%s)",
                request.edge_id,
                "its session ended" if request.ended else "its session moved to another replica",
            )
        return released

    def __del__(self) -> None:
        """Serve's shutdown of this replica: the checkpoints not yet written are written first."""
        keeper = getattr(self, "keeper", None)
        if keeper is not None:
            keeper.close()

    def _answer(self, message: Message, slot: Slot | None = None) -> Answer:
        """``message`` with this replica's news for the ingress's metrics (the slot's move and
        checkpoint, once)."""
        moved, checkpoint = slot.news() if slot is not None else (False, None)
        seconds, size = checkpoint if checkpoint is not None else (None, None)
        return Answer(
            message=message,
            replica=self.name,
            sessions=len(self._slots),
            moved=moved,
            checkpoint_seconds=seconds,
            checkpoint_bytes=size,
            replica_id=self.replica_id,
        )

    async def open(self, request: OpenSession) -> Answer:
        slot = self._slot()
        distiller = await self.teaching.new_student(request.hello, request.agreement.student_size)
        session = EdgeSession(
            hello=request.hello,
            agreement=request.agreement,
            params=self.teaching.params,
            traffic=Traffic(),
            distiller=distiller,
            telemetry_interval=request.telemetry_interval,
            session_id=request.session_id,
            sparse=self.settings.sparse_options(),
            updates=self.settings.update_policy(),
        )
        welcome = await self.teaching.open(session)
        # opened already (this request sent again): that session, whose same weights make the
        # same WELCOME
        if not await self.keeper.keep(slot, session):
            session = await self.keeper.session(slot, SessionRef(request.session_id, 0))
            welcome = await self.teaching.open(session)
        await self.keeper.forget_others(slot.edge_id, request.session_id)
        return self._answer(welcome, slot)

    async def resume(self, request: ResumeSession) -> Answer:
        """A resumed WELCOME for the session at the version the edge holds, from this replica's
        slot or the store; a non-fatal ERROR saying why where that session is not there at that
        version under the same agreement (the ingress then opens a new session)."""
        slot = self._slot()
        return self._answer(await self._resumed(slot, request), slot)

    async def _resumed(self, slot: Slot, request: ResumeSession) -> Welcome | Error:
        """:meth:`resume`'s answer for the edge of ``slot``."""
        ref = request.session
        try:
            session = await self.keeper.session(slot, ref)
        except ProtocolError as exc:
            return Error(code=exc.code.value, message=exc.message, fatal=False)
        same_terms = session.agreement == request.agreement and list(
            session.hello.class_names
        ) == list(request.hello.class_names)
        if not session.edge_weights_known:
            why = f"the store holds an older version of the session than the edge's {ref.version}"
        elif not same_terms:
            why = "the new HELLO agrees other codecs or classes than the session's"
        else:
            return await asyncio.to_thread(session.welcome, True)
        return Error(code=ErrorCode.INTERNAL.value, message=why, fatal=False)

    async def train(self, request: TrainKeyFrame) -> Answer:
        slot = self._slot()
        try:
            session = await self.keeper.session(slot, request.session, request.seq)
            if slot.reply_seq == request.seq and slot.reply is not None:
                # answered before, the answer lost on its way: again
                return self._answer(slot.reply, slot)
            assert session.distiller is not None, (
                "a teaching replica opens and restores sessions with a student"
            )
            session.last_seq = request.seq
            update, trained = await self.teaching.answer(
                session,
                request.frame,
                seq=request.seq,
                frame_index=request.frame_index,
                base_version=request.base_version,
            )
            assert isinstance(update, Update) and trained is not None, (
                "a session with a student is answered with an UPDATE"
            )
            answer = await self.keeper.kept_answer(slot, session, update, request.seq, trained)
        except ProtocolError as exc:
            return self._answer(_error(exc, request.seq), slot)
        return self._answer(answer, slot)

    async def resync(self, request: Resync) -> Answer:
        slot = self._slot()
        try:
            session = await self.keeper.session(slot, request.session)
            update = await self.teaching.resync(session, request.have_version)
            if not await self.keeper.keep(slot, session):
                raise ProtocolError(
                    ErrorCode.INTERNAL,
                    "another teaching replica changed this session meanwhile; ask again",
                )
        except ProtocolError as exc:
            return self._answer(_error(exc, None), slot)
        return self._answer(update, slot)

    async def label(self, request: LabelKeyFrame) -> Answer:
        try:
            labels, _ = await self.teaching.answer(
                None,
                request.frame,
                seq=request.seq,
                frame_index=request.frame_index,
                base_version=0,
            )
        except ProtocolError as exc:
            return self._answer(_error(exc, request.seq))
        return self._answer(labels)
