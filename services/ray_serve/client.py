"""The ingress's side of the teaching deployment: a
:class:`~services.server.remote_teaching.RemoteTeaching` over a Serve deployment handle.

Requests of a distill session carry ``multiplexed_model_id=edge_id`` (Serve routes them to the
replica holding that student). A request that a dying or unreachable replica did not answer is
sent again, for up to ``retry_seconds``: the next replica rebuilds the session from its
checkpoint (or answers from it, when the lost answer was already checkpointed), so the edge keeps
its connection, its version and its place in the version sequence. An error the replica
answers with goes to the edge for that key frame only.
"""

from __future__ import annotations

import asyncio
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
    Resync,
    SessionRef,
    TrainKeyFrame,
)
from services.server.metrics import ServerMetrics
from services.server.remote_teaching import SessionEnded
from services.server.session import EdgeSession
from shadowtutor.protocol.errors import ErrorCode, ProtocolError
from shadowtutor.protocol.messages import Error, KeyFrame, Labels, Message, Update, Welcome

log = logging.getLogger(__name__)
REPLICA_LOST = (
    RayActorError,
    ActorDiedError,
    ActorUnavailableError,
    DeploymentUnavailableError,
    ReplicaUnavailableError,
)


class ServeTeaching:
    def __init__(self, handle: DeploymentHandle, retry_seconds: float = 60.0) -> None:
        self.handle = handle
        self.retry_seconds = retry_seconds
        self.metrics: ServerMetrics | None = None
        self.teaching_metrics: TeachingMetrics | None = None

    def export_to(self, metrics: ServerMetrics, live_edges: Callable[[], Collection[str]]) -> None:
        """Count into the server's metrics (distillation latency and steps) and add the teaching's
        own; ``live_edges()`` names the edges connected now."""
        self.metrics = metrics
        self.teaching_metrics = TeachingMetrics(metrics.registry, live_edges)

    async def describe(self) -> dict[str, Any]:
        return await self.handle.describe.remote()

    async def open(self, session: EdgeSession) -> Welcome:
        if session.mode != "distill":
            # no student: the WELCOME needs no model
            return session.welcome()
        student_size = session.student_size()
        size = (student_size[0], student_size[1]) if student_size is not None else None
        request = OpenSession(
            hello=dataclasses.replace(session.hello, token=None),
            session_id=session.session_id,
            frame_codec=session.frame_codec,
            weight_codec=session.weight_codec,
            delta_codec=session.delta_codec,
            student_size=size,
            telemetry_interval=session.telemetry_interval,
        )
        return self._checked(await self._call("open", session.hello.edge_id, request))

    async def key_frame(
        self, session: EdgeSession, key_frame: KeyFrame, frame: np.ndarray
    ) -> Update | Labels:
        if session.mode != "distill":
            labels = self._checked(
                await self._call(
                    "label", None, LabelKeyFrame(key_frame.seq, key_frame.frame_index, frame)
                )
            )
            session.stats.labelled += 1
            session.stats.teacher_seconds += labels.teacher_ms / 1000.0
            return labels
        request = TrainKeyFrame(
            SessionRef(session.session_id, session.version),
            key_frame.seq,
            key_frame.frame_index,
            key_frame.base_version,
            frame,
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
        stats = session.stats
        session.version = update.version
        stats.labelled += 1
        stats.distilled += 1
        stats.steps += update.steps
        stats.teacher_seconds += update.teacher_ms / 1000.0
        stats.distill_seconds += update.distill_ms / 1000.0
        stats.last_metric = update.metric
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
