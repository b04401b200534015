"""The checkpoints of the sessions one teaching replica holds (:class:`SessionKeeper`): each
edge's session kept in a :class:`Slot`, rebuilt from the store where the slot does not hold it at
the version the ingress knows, and every new version claimed and stored.

Every change to a session is stored (``services.checkpoints.store``) as a new version that only its
first writer stores. Each UPDATE's version gets a journal entry (``services.checkpoints.journal``:
the UPDATE itself) stored before the answer leaves; storing it is the version's claim. Every
``--checkpoint-every`` versions, and for the WELCOME and a resync (whose versions are claimed before
the answer), a snapshot of the whole state (``services.checkpoints.session``) is captured before the
answer and encoded and written after it by the keeper's
:class:`~services.checkpoints.writer.CheckpointWriter`. A replica that lost the claim (both answered
a request sent again) answers with the winner's answer instead of its own. A replica that gets a
request for a session it does not hold, or holds at another version than the one the ingress last
sent, rebuilds it from the newest snapshot and the journal entries after it: that is how a session
survives its replica's death, an eviction, or a move to another replica, at the version the edge
holds. A store older than the version the edge holds (a WELCOME's or resync's snapshot lost with its
replica) is waited for briefly, then taken as it is: the session trains on from there and its next
update carries full weights. Design: docs/design/session_checkpoints.md.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Protocol

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
from services.checkpoints.store import CheckpointStore, open_store
from services.checkpoints.writer import CheckpointWriter, Written
from services.server.settings import ServerSettings
from services.server.teaching.local import SessionEnded, in_pool
from services.server.teaching.session import EdgeSession
from shadowtutor.algorithms.distill import Distiller, DistillResult
from shadowtutor.algorithms.params import AlgorithmParams
from shadowtutor.protocol.errors import ErrorCode, ProtocolError
from shadowtutor.protocol.messages import Message, Update

log = logging.getLogger(__name__)
# how long a replica waits for a checkpoint still being written elsewhere before taking an older one
CHECKPOINT_LAG_SECONDS = 2.0


@dataclass
class Slot:
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

    def news(self) -> tuple[bool, tuple[float, int] | None]:
        """Whether the session was rebuilt here and the checkpoint writes since the last answer,
        once: both are cleared."""
        news = (self.moved, self.checkpoint)
        self.moved, self.checkpoint = False, None
        return news


@dataclass(frozen=True)
class SessionRef:
    """The session a request is for, as the ingress last saw it: ``version`` is the version last
    sent to the edge (a replica whose copy differs rebuilds the session from its checkpoint)."""

    session_id: str
    version: int


class Students(Protocol):
    """What a rebuilt session needs of the teaching: the algorithm parameters, a fresh base
    student on this process's device, and the pool that model work runs in."""

    @property
    def params(self) -> AlgorithmParams: ...

    @property
    def pool(self) -> Executor: ...

    def new_distiller(self, student_size: tuple[int, int] | None = None) -> Distiller: ...


def sweep_period(ttl: float) -> float:
    """Seconds between a keeper's sweeps of the store for sessions idle past ``ttl``."""
    return min(300.0, ttl / 4)


class SessionKeeper:
    """The checkpoints of one replica's sessions in ``store``: :meth:`session` gives a slot's
    session at the version asked (rebuilt on ``students`` where needed), :meth:`keep` and
    :meth:`kept_answer` store each new version, the snapshots written behind the answers by
    ``writer``. ``settings``: the checkpoint key, ``checkpoint_every`` and the largest frame."""

    def __init__(
        self,
        store: CheckpointStore,
        *,
        writer: CheckpointWriter,
        settings: ServerSettings,
        students: Students,
    ) -> None:
        self.store = store
        self.writer = writer
        self.settings = settings
        self.students = students

    @classmethod
    def open(cls, location: str, settings: ServerSettings, students: Students) -> SessionKeeper:
        """A keeper of the store at ``location``, whose writer forgets sessions idle past
        ``settings.checkpoint_ttl``."""
        store = open_store(location)
        ttl = settings.checkpoint_ttl
        writer = CheckpointWriter(store, ttl, sweep_period(ttl)).start()
        return cls(store, writer=writer, settings=settings, students=students)

    def reconfigure(self, settings: ServerSettings) -> None:
        """Take ``settings`` from now on: ``checkpoint_every`` from the next version, the
        checkpoints' time to live from the next sweep (due within the new sweep period)."""
        self.settings = settings
        ttl = settings.checkpoint_ttl
        self.writer.retain(ttl, sweep_period(ttl))

    def close(self) -> bool:
        """Write the snapshots not yet written (:meth:`CheckpointWriter.close`)."""
        return self.writer.close()

    async def forget_others(self, edge_id: str, session_id: str) -> None:
        """Drop the edge's stored sessions other than ``session_id``."""
        await asyncio.to_thread(self.store.forget_others, edge_id, session_id)

    async def session(self, slot: Slot, ref: SessionRef, seq: int | None = None) -> EdgeSession:
        """The slot's session at the version the ingress knows (or one further, answered for
        ``seq``); rebuilt from the store when the slot holds none or another one. Versions past
        that (answers the edge never received: their ingress died) are dropped from the store.
        :class:`SessionEnded` where the store has no usable checkpoint of it."""
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

    async def _newest(self, slot: Slot, ref: SessionRef, until: int) -> Restored:
        """The session ``ref`` rebuilt from its newest snapshot and the journal entries after it, up
        to version ``until``, waiting up to :data:`CHECKPOINT_LAG_SECONDS` for them to reach
        ``ref.version`` (another replica may still be writing a snapshot); :class:`SessionEnded`
        when there is none or it is refused (the edge is told to start a fresh session)."""
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
                    key = self.settings.checkpoint_key()
                    chain = [unseal(data, key, slot.edge_id, ref.session_id) for data in stored]
                    version = header(chain[-1])["version"]
                    if late or (isinstance(version, int) and version >= ref.version):
                        rebuild = functools.partial(
                            self._rebuild, edge_id=slot.edge_id, session_id=ref.session_id
                        )
                        restored = await in_pool(self.students.pool, rebuild, chain, until)
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
        self, chain: list[bytes], until: int, *, edge_id: str, session_id: str
    ) -> Restored:
        """The session rebuilt from ``chain`` (its snapshot, then journal entries up to
        ``until``)."""
        settings = self.settings
        restored = restore(
            chain[0],
            self.students.params,
            self.students.new_distiller,
            edge_id=edge_id,
            session_id=session_id,
            max_size=(settings.max_frame_width, settings.max_frame_height),
            updates=settings.update_policy(),
        )
        return replay(restored, chain[1:], edge_id=edge_id, session_id=session_id, until=until)

    async def kept_answer(
        self, slot: Slot, session: EdgeSession, answer: Update, seq: int, trained: DistillResult
    ) -> Message:
        """The answer to key frame ``seq``: ``answer`` (which ``trained`` reports) once its version
        is kept, or the answer stored by the replica that kept that version first. A non-fatal
        ``ProtocolError`` where that replica's answer is not this key frame's."""
        if await self.keep(slot, session, answer, seq, trained):
            return answer
        await self.session(slot, SessionRef(session.session_id, session.version))
        if slot.reply_seq != seq or slot.reply is None:
            raise ProtocolError(
                ErrorCode.INTERNAL, "another teaching replica changed this session meanwhile"
            )
        return slot.reply

    async def keep(
        self,
        slot: Slot,
        session: EdgeSession,
        reply: Message | None = None,
        seq: int | None = None,
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
        due = (
            not isinstance(reply, Update)
            or session.version - slot.snapshot_version >= self.settings.checkpoint_every
        )
        record = await asyncio.to_thread(capture, session, reply, seq, trained) if due else None
        if isinstance(reply, Update):
            journaled = reply
            start = time.perf_counter()
            data = await asyncio.to_thread(
                lambda: seal(entry(session, journaled, seq), key, edge_id, session.session_id)
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

        def sealed() -> bytes:
            return seal(pack(record), key, edge_id, session.session_id)

        self.writer.submit(edge_id, session.session_id, session.version, sealed, done)
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
