"""The teaching deployment's replica: the teacher, the distillation engine and the students of its
edges.

The ingress sends every request of an edge with ``multiplexed_model_id=edge_id``; the
deployment's request router (``services.ray_serve.placement``) sends it to the replica that holds
the edge's session, or moves it to a less loaded one, from what each replica reports holding
(:meth:`TeachingReplica.record_routing_stats`). A replica holds at most ``students`` sessions
(``--ray-replica-sessions``, default ``max_sessions``) in slots; the least recently used one is
dropped past that, and :meth:`TeachingReplica.release` drops one that moved away or ended.

Every change to a session is stored (``services.checkpoints.store``) as a new version that
only its first writer stores. Each UPDATE's version gets a journal entry
(``services.checkpoints.journal``: the UPDATE itself) stored before the answer leaves; storing it
is the version's claim. Every ``--checkpoint-every`` versions, and for the WELCOME and a resync
(whose versions are claimed before the answer), a snapshot of the whole state
(``services.checkpoints.session``) is captured before the answer and encoded and written after
it by the replica's :class:`~services.checkpoints.writer.CheckpointWriter`. A replica that
lost the claim (both answered a request sent again) answers with the winner's answer instead of its
own. A replica that gets a request for a session it does not hold, or holds at another version than
the one the ingress last sent, rebuilds it from the newest snapshot and the journal entries after
it: that is how a session survives its replica's death, an eviction, or a move to another replica,
at the version the edge holds. A retried key frame whose answer is stored is answered from there,
not trained again. A store older than the version the edge holds (a WELCOME's or resync's snapshot
lost with its replica) is waited for briefly, then taken as it is: the session trains on from there
and its next update carries full weights.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import socket
import time
from dataclasses import dataclass
from typing import Any

from ray import serve
from ray.serve.exceptions import RayServeException

from services.checkpoints.journal import entry, replay
from services.checkpoints.seal import seal, unseal
from services.checkpoints.session import (
    CheckpointFormatError,
    Restored,
    capture,
    header,
    pack,
    restore,
)
from services.checkpoints.store import open_store
from services.checkpoints.writer import CheckpointWriter, Written
from services.ray_serve import logs
from services.ray_serve.requests import (
    Answer,
    LabelKeyFrame,
    OpenSession,
    ReleaseSlot,
    ResumeSession,
    Resync,
    SessionRef,
    TrainKeyFrame,
)
from services.ray_serve.slots import SlotTable
from services.server.metrics.server_metrics import ServerMetrics
from services.server.runtime import ServerRuntime
from services.server.settings import ServerSettings
from services.server.teaching.loading import load_models
from services.server.teaching.local import LocalTeaching, SessionEnded
from services.server.teaching.session import EdgeSession, Traffic
from services.server.teaching.teacher_queue import TeacherFailed
from shadowtutor.algorithms.distill import DistillResult
from shadowtutor.heap import freeze_startup_heap
from shadowtutor.protocol.errors import ErrorCode, ProtocolError
from shadowtutor.protocol.messages import Error, Message, Update, Welcome

log = logging.getLogger(__name__)
# how long a replica waits for a checkpoint still being written elsewhere before taking an older one
CHECKPOINT_LAG_SECONDS = 2.0


@dataclass
class _Slot:
    """One edge's place on this replica: its session (None until built) and the last answer sent."""

    edge_id: str
    session: EdgeSession | None = None
    reply: Message | None = None
    reply_seq: int | None = None
    # rebuilt from its checkpoint for the request being answered
    moved: bool = False
    # (seconds, bytes) of the checkpoint writes not yet reported with an answer, summed
    checkpoint: tuple[float, int] | None = None
    # the version of the session's newest snapshot (written or on its way)
    snapshot_version: int = -1

    def wrote(self, seconds: float, size: int) -> None:
        """Count a checkpoint write for the next answer's report."""
        before = self.checkpoint or (0.0, 0)
        self.checkpoint = (before[0] + seconds, before[1] + size)


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
    work goes through a :class:`~services.server.teaching.local.LocalTeaching`; every answer is an
    :class:`Answer` carrying the message the ingress forwards. Loads the models at construction (a
    replica that cannot load them fails to start, and Serve says why)."""

    def __init__(self, settings: ServerSettings, store: str, students: int | None = None) -> None:
        """``students``: the most students held here (default ``settings.max_sessions``)."""
        logs.configure(settings.log_level)
        self.settings = teaching_settings(settings)
        self.store = open_store(store)
        self.writer = CheckpointWriter(
            self.store, settings.checkpoint_ttl, min(300.0, settings.checkpoint_ttl / 4)
        ).start()
        self._models = load_models(self.settings)
        self.runtime = ServerRuntime(self.settings, ServerMetrics(1, 60.0))
        self.teaching = LocalTeaching(self.runtime)
        freeze_startup_heap()
        self._started = False

        self.name = f"{socket.gethostname()}:{os.getpid()}"
        self.replica_id = _replica_id(self.name)

        held = self.settings.max_sessions if students is None else students
        self._slots = SlotTable(held, _Slot)

    def _start(self) -> ServerRuntime:
        # the engine's tasks belong to the replica's event loop
        if not self._started:
            self.runtime.install(self._models)
            self._started = True
        return self.runtime

    async def describe(self) -> dict[str, Any]:
        self._start()
        described = await self.teaching.describe()
        return {
            "class_names": described["class_names"],
            "teacher": described["teacher"],
            "where": f"Ray Serve ({described['device']} teaching replicas)",
        }

    async def _slot(self, edge_id: str) -> _Slot:
        return self._slots.take(edge_id)

    def record_routing_stats(self) -> dict[str, Any]:
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
        writer = getattr(self, "writer", None)
        if writer is not None:
            writer.close()

    def _answer(self, message: Message, slot: _Slot | None = None) -> Answer:
        """``message`` with this replica's news for the ingress's metrics (the slot's move and
        checkpoint, once)."""
        moved, checkpoint = (slot.moved, slot.checkpoint) if slot is not None else (False, None)
        if slot is not None:
            slot.moved, slot.checkpoint = False, None
        seconds, size = checkpoint if checkpoint is not None else (None, None)
        return Answer(message, self.name, len(self._slots), moved, seconds, size, self.replica_id)

    async def open(self, request: OpenSession) -> Answer:
        runtime = self._start()
        slot = await self._slot(serve.get_multiplexed_model_id())
        distiller = await self.teaching.new_student(request.hello, request.student_size)
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
            sparse=self.settings.sparse_options(),
            updates=self.settings.update_policy(),
        )
        welcome = await self.teaching.open(session)
        # opened already (this request sent again):
        if not await self._checkpoint(slot, session, None, None):
            # that session
            session = await self._session(slot, SessionRef(request.session_id, 0), None)
            # the same weights, so the same WELCOME
            welcome = await self.teaching.open(session)
        await asyncio.to_thread(self.store.forget_others, slot.edge_id, request.session_id)
        return self._answer(welcome, slot)

    async def resume(self, request: ResumeSession) -> Answer:
        """A resumed WELCOME for the session at the version the edge holds, from this replica's
        slot or the store; a non-fatal ERROR saying why where that session is not there at that
        version under the same agreement (the ingress then opens a new session)."""
        self._start()
        slot = await self._slot(serve.get_multiplexed_model_id())
        return self._answer(await self._resumed(slot, request), slot)

    async def _resumed(self, slot: _Slot, request: ResumeSession) -> Welcome | Error:
        """:meth:`resume`'s answer for the edge of ``slot``."""
        ref = request.session
        try:
            session = await self._session(slot, ref, None)
        except ProtocolError as exc:
            return Error(code=exc.code.value, message=exc.message, fatal=False)
        agreed = (
            session.frame_codec,
            session.weight_codec,
            session.delta_codec,
            list(session.hello.class_names),
        )
        asked = (
            request.frame_codec,
            request.weight_codec,
            request.delta_codec,
            list(request.hello.class_names),
        )
        if not session.edge_weights_known:
            why = f"the store holds an older version of the session than the edge's {ref.version}"
        elif agreed != asked:
            why = "the new HELLO agrees other codecs or classes than the session's"
        else:
            return await asyncio.to_thread(session.welcome, True)
        return Error(code=ErrorCode.INTERNAL.value, message=why, fatal=False)

    async def train(self, request: TrainKeyFrame) -> Answer:
        self._start()
        slot = await self._slot(serve.get_multiplexed_model_id())
        try:
            session = await self._session(slot, request.session, request.seq)
            if slot.reply_seq == request.seq and slot.reply is not None:
                # answered before, the answer lost on its way: again
                return self._answer(
                    slot.reply,
                    slot,
                )
            assert session.distiller is not None, (
                "a teaching replica opens and restores sessions with a student"
            )
            session.last_seq = request.seq
            answer, trained = await self.teaching.answer(
                session,
                request.frame,
                seq=request.seq,
                frame_index=request.frame_index,
                base_version=request.base_version,
            )
        except ProtocolError as exc:
            return self._answer(_error(exc, request.seq), slot)
        except TeacherFailed as exc:
            error = Error(
                code=ErrorCode.TEACHER_FAILED.value, message=str(exc), fatal=False, seq=request.seq
            )
            return self._answer(error, slot)
        update: Message = answer
        # another replica may have answered it first: then wait for its checkpoint, and answer with
        # it
        if not await self._checkpoint(slot, session, update, request.seq, trained):
            session = await self._session(
                slot, SessionRef(request.session.session_id, session.version), None
            )
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
        update = await self.teaching.resync(session, request.have_version)
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
        self._start()
        try:
            labels, _ = await self.teaching.answer(
                None,
                request.frame,
                seq=request.seq,
                frame_index=request.frame_index,
                base_version=0,
            )
        except TeacherFailed as exc:
            return self._answer(
                Error(
                    code=ErrorCode.TEACHER_FAILED.value,
                    message=str(exc),
                    fatal=False,
                    seq=request.seq,
                )
            )
        return self._answer(labels)

    async def _session(self, slot: _Slot, ref: SessionRef, seq: int | None) -> EdgeSession:
        """The slot's session at the version the ingress knows (or one further, answered for
        ``seq``); rebuilt from the store when the slot holds none or another one. Versions past
        that (answers the edge never received: their ingress died) are dropped from the store."""
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
        restored = await self._newest(slot, ref, ref.version + (seq is not None))
        if restored.session.version > ref.version and restored.reply_seq != seq:
            restored = await self._newest(slot, ref, ref.version)
        session = restored.session
        dropped = await asyncio.to_thread(
            self.store.truncate, slot.edge_id, ref.session_id, session.version
        )
        if dropped:
            log.info(
                "%d stored record(s) of session %s of edge %r past version %d never reached the "
                "edge: dropped",
                dropped,
                ref.session_id,
                slot.edge_id,
                session.version,
            )
        if session.version < ref.version:
            log.warning(
                "the checkpoint of session %s of edge %r is at version %d, the edge holds %d (its "
                "last checkpoint was lost with its replica): training goes on from it, the next "
                "update is full",
                ref.session_id,
                slot.edge_id,
                session.version,
                ref.version,
            )
            session.version, session.edge_weights_known = ref.version, False
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

    async def _newest(self, slot: _Slot, ref: SessionRef, until: int) -> Restored:
        """The session ``ref`` rebuilt from its newest snapshot and the journal entries after it, up
        to version ``until``, waiting up to :data:`CHECKPOINT_LAG_SECONDS` for them to reach
        ``ref.version`` (another replica may still be writing a snapshot); :class:`SessionEnded`
        when there is none or it is refused (the edge is told to start a fresh session)."""
        settings = self.settings
        deadline = time.monotonic() + CHECKPOINT_LAG_SECONDS
        try:
            while True:
                stored = await asyncio.to_thread(
                    self.store.load_chain, slot.edge_id, ref.session_id, until
                )
                late = time.monotonic() > deadline
                if not stored and late:
                    slot.session = None
                    raise SessionEnded(
                        ErrorCode.INTERNAL,
                        f"no checkpoint of this session in {self.store.location} (idle past "
                        "--checkpoint-ttl, or never written); reconnect: the next session starts "
                        "fresh",
                    )
                if stored:
                    key = settings.checkpoint_key()
                    chain = [unseal(data, key, slot.edge_id, ref.session_id) for data in stored]
                    version = header(chain[-1])["version"]
                    if late or (isinstance(version, int) and version >= ref.version):
                        restored: Restored = await self._in_pool(
                            functools.partial(
                                self._rebuild,
                                edge_id=slot.edge_id,
                                session_id=ref.session_id,
                                until=until,
                            ),
                            chain,
                        )
                        slot.snapshot_version = restored.snapshot_version
                        return restored
                await asyncio.sleep(0.1)
        except CheckpointFormatError as exc:
            log.warning(
                "the checkpoint of session %s of edge %r is refused (%s); the edge is told to "
                "start a fresh session",
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

    def _rebuild(
        self, chain: list[bytes], *, edge_id: str, session_id: str, until: int
    ) -> Restored:
        """The session rebuilt from ``chain`` (its snapshot, then journal entries up to
        ``until``)."""
        settings = self.settings
        restored = restore(
            chain[0],
            self.runtime.params,
            self.runtime.new_distiller,
            edge_id=edge_id,
            session_id=session_id,
            max_size=(settings.max_frame_width, settings.max_frame_height),
            updates=settings.update_policy(),
        )
        return replay(restored, chain[1:], edge_id=edge_id, session_id=session_id, until=until)

    async def _checkpoint(
        self,
        slot: _Slot,
        session: EdgeSession,
        reply: Message | None,
        seq: int | None,
        trained: DistillResult | None = None,
    ) -> bool:
        """Store the session's new version (with ``reply``, the answer to ``seq``, and ``trained``,
        the training it reports, whose host copies are the state): an UPDATE's journal entry now,
        before the answer (the version's claim), and a snapshot behind the answer when one is due
        (every ``checkpoint_every`` versions, and for a version that is not an UPDATE's, whose claim
        is taken now); the writes' time and size go out with the slot's next answer. False when
        another replica claimed that version first and stored it within
        :data:`CHECKPOINT_LAG_SECONDS`: then the slot is emptied, and the caller answers from the
        store (a claim whose snapshot never comes was its replica's last act: this replica stores
        its own)."""
        edge_id, key = slot.edge_id, self.settings.checkpoint_key()
        journaled = isinstance(reply, Update)
        due = (
            not journaled
            or session.version - slot.snapshot_version >= self.settings.checkpoint_every
        )
        record = await asyncio.to_thread(capture, session, reply, seq, trained) if due else None
        if journaled:
            assert isinstance(reply, Update)
            start = time.perf_counter()
            data = await asyncio.to_thread(
                lambda: seal(entry(session, reply, seq), key, edge_id, session.session_id)
            )
            won = await asyncio.to_thread(
                self.store.append, edge_id, session.session_id, session.version, data
            )
            if won:
                slot.wrote(time.perf_counter() - start, len(data))
        else:
            won = await asyncio.to_thread(
                self.store.claim, edge_id, session.session_id, session.version
            )
        if not won:
            if await self._stored_soon(slot.edge_id, session.session_id, session.version):
                log.warning(
                    "version %d of session %s was claimed and stored by another replica first; "
                    "answering with its checkpoint",
                    session.version,
                    session.session_id,
                )
                slot.session = None
                return False
            log.warning(
                "version %d of session %s was claimed by a replica that never stored it (lost); "
                "this one stores it",
                session.version,
                session.session_id,
            )
        slot.session, slot.reply, slot.reply_seq = session, reply, seq
        if record is None:
            return True
        slot.snapshot_version = session.version
        loop = asyncio.get_running_loop()

        def done(result: Written) -> None:
            loop.call_soon_threadsafe(slot.wrote, result.seconds, result.size)

        self.writer.submit(
            edge_id,
            session.session_id,
            session.version,
            lambda: seal(pack(record), key, edge_id, session.session_id),
            done,
        )
        return True

    async def _stored_soon(self, edge_id: str, session_id: str, version: int) -> bool:
        """Whether the session's checkpoint at ``version`` (or later) is in the store within
        :data:`CHECKPOINT_LAG_SECONDS`."""
        deadline = time.monotonic() + CHECKPOINT_LAG_SECONDS
        while True:
            latest = await asyncio.to_thread(self.store.latest, edge_id, session_id)
            if latest is not None and latest >= version:
                return True
            if time.monotonic() > deadline:
                return False
            await asyncio.sleep(0.1)

    async def _in_pool(self, fn: Any, *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(
            self.runtime.distill_pool, fn, *args
        )
