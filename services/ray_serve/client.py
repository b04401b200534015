"""The ingress's side of the teaching deployment: a
:class:`~services.server.teaching.local.Teaching` over a Serve deployment handle.

Requests of a distill session carry ``multiplexed_model_id=edge_id``: the deployment's request
router (``services.ray_serve.placement``) sends them to the replica holding that session, or moves
the session to a less loaded replica. When an edge's answer comes from another replica than its
last one, the old one is told to release its copy; so is the last one of an edge that left.

A request that a dying or unreachable replica did not answer is sent again, for up to
``retry_seconds``: the next replica rebuilds the session from its checkpoint (or answers from it,
when the lost answer was already checkpointed), so the edge keeps its connection, its version and
its place in the version sequence. An error the replica answers with goes to the edge for that key
frame only.
"""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import logging
import time
from collections.abc import Callable, Collection
from typing import Any

import numpy as np
from ray.exceptions import ActorDiedError, ActorUnavailableError, RayActorError
from ray.serve.exceptions import DeploymentUnavailableError, ReplicaUnavailableError
from ray.serve.handle import DeploymentHandle

from services.ray_serve.metrics import TeachingMetrics
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
from services.server.metrics.server_metrics import ServerMetrics
from services.server.teaching.description import Description
from services.server.teaching.local import SessionEnded
from services.server.teaching.session import EdgeSession
from shadowtutor.algorithms.distill import Distiller
from shadowtutor.protocol.errors import ErrorCode, ProtocolError
from shadowtutor.protocol.messages import Error, Hello, KeyFrame, Labels, Message, Update, Welcome

log = logging.getLogger(__name__)
REPLICA_LOST = (
    RayActorError,
    ActorDiedError,
    ActorUnavailableError,
    DeploymentUnavailableError,
    ReplicaUnavailableError,
)


# seconds a release may wait for its replica before it is sent again
RELEASE_TIMEOUT = 30.0
# seconds between looks for edges that left
SWEEP_INTERVAL = 1.0


class ServeTeaching:
    """Teaching on a Ray Serve teaching deployment (``handle``): the ingress's sessions hold no
    student; their version and statistics follow the replicas' answers. A request no replica
    answered is sent again for up to ``retry_seconds``, then SERVER_BUSY."""

    def __init__(self, handle: DeploymentHandle, retry_seconds: float = 60.0) -> None:
        self.handle = handle
        self.retry_seconds = retry_seconds
        self.metrics: ServerMetrics | None = None
        self.teaching_metrics: TeachingMetrics | None = None
        self.live_edges: Callable[[], Collection[str]] | None = None
        # edge id -> unique id of the replica whose answer it got last
        self.holders: dict[str, str] = {}
        self._swept = 0.0
        self._releases: set[asyncio.Task[None]] = set()
        # releases that failed, sent again at the next sweep (a slot left behind counts as a
        # session)
        self._failed: list[ReleaseSlot] = []
        self.description: Description | None = None
        self.not_ready_reason = "waiting for the teaching deployment"
        self._describer: asyncio.Task[None] | None = None

    def export_to(self, metrics: ServerMetrics, live_edges: Callable[[], Collection[str]]) -> None:
        """Count into the server's metrics (distillation latency and steps) and add the teaching's
        own; ``live_edges()`` names the edges connected now."""
        self.metrics = metrics
        self.live_edges = live_edges
        self.teaching_metrics = TeachingMetrics(metrics.registry, live_edges)

    def start(self) -> None:
        """Ask the deployment what it is, in the background, until it answers: ready then."""
        self._describer = asyncio.get_running_loop().create_task(
            self._describe(), name="describe-teaching"
        )

    async def _describe(self) -> None:
        while True:
            try:
                described: Description = await self.handle.describe.remote()
            # not up yet (replicas still loading their models): ask again
            except Exception as exc:
                self.not_ready_reason = f"waiting for the teaching deployment: {exc}"
                await asyncio.sleep(1.0)
                continue
            self.description, self.not_ready_reason = described, ""
            log.info(
                "ready: teaching on %s (teacher %r, classes %s)",
                described.where,
                described.teacher,
                list(described.class_names),
            )
            return

    async def stop(self) -> None:
        """Stop asking; the replicas are the deployment's to stop."""
        if self._describer is not None:
            self._describer.cancel()
            await asyncio.wait({self._describer})
        self.description, self.not_ready_reason = None, "the server is shutting down"

    async def new_student(
        self, hello: Hello, student_size: tuple[int, int] | None
    ) -> Distiller | None:
        """None: the student lives on the edge's teaching replica, made when the session opens."""
        return None

    async def open(self, session: EdgeSession) -> Welcome:
        if session.mode != "distill":
            # no student: the WELCOME needs no model
            return session.welcome()
        request = OpenSession(
            hello=dataclasses.replace(session.hello, token=None),
            session_id=session.session_id,
            agreement=session.agreement,
            telemetry_interval=session.telemetry_interval,
        )
        return self._checked(await self._call("open", session.hello.edge_id, request))

    async def resume(self, session: EdgeSession) -> Welcome | None:
        """The teaching replica that holds the session, or rebuilds it from the store, at the
        version the edge holds; None (logged) where it cannot."""
        if session.mode != "distill":
            return None
        request = ResumeSession(
            hello=dataclasses.replace(session.hello, token=None),
            session=SessionRef(session.session_id, session.version),
            agreement=session.agreement,
            telemetry_interval=session.telemetry_interval,
        )
        answer = await self._call("resume", session.hello.edge_id, request)
        if isinstance(answer, Error):
            log.info(
                "session %s of edge %r not resumed (%s); a new session opens",
                session.session_id,
                session.hello.edge_id,
                answer.message,
            )
            return None
        return self._checked(answer)

    async def key_frame(
        self, session: EdgeSession, key_frame: KeyFrame, frame: np.ndarray
    ) -> Update | Labels:
        if session.mode != "distill":
            labels = self._checked(
                await self._call(
                    "label", None, LabelKeyFrame(key_frame.seq, key_frame.frame_index, frame)
                )
            )
            session.stats.count_answer(labels)
            return labels
        request = TrainKeyFrame(
            session=SessionRef(session.session_id, session.version),
            seq=key_frame.seq,
            frame_index=key_frame.frame_index,
            base_version=key_frame.base_version,
            frame=frame,
        )
        update = self._checked(await self._call("train", session.hello.edge_id, request))
        self._count(session, update)
        return update

    async def resync(self, session: EdgeSession, have_version: int) -> Update:
        request = Resync(SessionRef(session.session_id, session.version), have_version)
        update = self._checked(await self._call("resync", session.hello.edge_id, request))
        session.version = update.version
        return update

    def _count(self, session: EdgeSession, update: Update) -> None:
        """The session's version and statistics as the replica's answer tells them."""
        session.version = update.version
        session.stats.count_answer(update)
        if self.metrics is not None:
            self.metrics.distill_latency.observe(update.distill_ms / 1000.0)
            self.metrics.distill_steps.inc(update.steps)

    @staticmethod
    def _checked(answer: Message) -> Any:
        """The answer, or the ProtocolError a replica's ERROR stands for."""
        if isinstance(answer, Error):
            raise (SessionEnded if answer.fatal else ProtocolError)(
                ErrorCode(answer.code), answer.message
            )
        return answer

    async def _call(self, method: str, edge_id: str | None, request: Any) -> Message:
        """``method(request)`` on a teaching replica (the edge's, when ``edge_id`` is given), sent
        again while replicas are lost, for up to ``retry_seconds``."""
        handle = (
            self.handle if edge_id is None else self.handle.options(multiplexed_model_id=edge_id)
        )
        deadline = time.monotonic() + self.retry_seconds
        while True:
            try:
                answer: Answer = await getattr(handle, method).remote(request)
                if self.teaching_metrics is not None:
                    self.teaching_metrics.record(answer, edge_id)
                if edge_id is not None:
                    self._held_by(edge_id, answer.replica_id)
                if answer.moved:
                    log.info(
                        "the session of edge %r was rebuilt from its checkpoint on replica %s (%s)",
                        edge_id,
                        answer.replica,
                        method,
                    )
                return answer.message
            except REPLICA_LOST as exc:
                if time.monotonic() > deadline:
                    raise ProtocolError(
                        ErrorCode.SERVER_BUSY,
                        f"no teaching replica answered for {self.retry_seconds:g} s",
                    ) from None
                lost = None
                if self.teaching_metrics is not None:
                    self.teaching_metrics.retries.inc()
                    lost = self.teaching_metrics.lost(edge_id) if edge_id is not None else None
                log.warning(
                    "teaching replica %s was lost during %s for edge %r (%s); sending it again",
                    lost or "?",
                    method,
                    edge_id,
                    type(exc).__name__,
                )
                await asyncio.sleep(0.2)

    def _held_by(self, edge_id: str, replica_id: str) -> None:
        """The edge's session is on ``replica_id`` now: its copy on the replica it left is released,
        and so are the copies of edges that left (looked for at most every ``SWEEP_INTERVAL``
        seconds)."""
        before = self.holders.get(edge_id)
        self.holders[edge_id] = replica_id
        if before is not None and before != replica_id:
            self._release(ReleaseSlot(edge_id, before))
        now = time.monotonic()
        if self.live_edges is None or now - self._swept < SWEEP_INTERVAL:
            return
        self._swept = now
        failed, self._failed = self._failed, []
        for request in failed:
            self._release(request)
        live = set(self.live_edges())
        for edge in [edge for edge in self.holders if edge not in live]:
            self._release(ReleaseSlot(edge, self.holders.pop(edge), ended=True))

    def _release(self, request: ReleaseSlot) -> None:
        """Send ``request`` in the background; when its replica does not answer in
        ``RELEASE_TIMEOUT`` seconds, again at the next sweep (a replica that is gone answers no
        more: its router sends the request to any other replica, which ignores it)."""

        async def release() -> None:
            try:
                await asyncio.wait_for(self.handle.release.remote(request), RELEASE_TIMEOUT)
            except Exception as exc:
                # the release only frees memory and evens the count: never an edge's error
                log.warning(
                    "could not release the slot of edge %r on replica %s (%s); trying again",
                    request.edge_id,
                    request.replica_id,
                    type(exc).__name__,
                )
                self._failed.append(request)

        # a context of its own: not a child of the request that happened to send it (Serve would
        # cancel it when that request ends)
        task = asyncio.get_running_loop().create_task(release(), context=contextvars.Context())
        self._releases.add(task)
        task.add_done_callback(self._releases.discard)
