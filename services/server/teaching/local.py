"""What a session's model work goes through: one :class:`Teaching` interface, chosen when the server
starts.

The WebSocket connection (``services.server.connections.ws_edge``) checks and decodes each message,
then asks its runtime's ``teaching`` for a session's student, its WELCOME, the answer to a key frame
and the full weights of a resync, without knowing where that work runs:

* :class:`LocalTeaching`: the teacher queue and the distillation engine of this process;
* ``services.ray_serve.client.ServeTeaching``: a Ray Serve teaching deployment, whose replicas run
  a :class:`LocalTeaching` of their own (``services.ray_serve.teaching``).

:meth:`LocalTeaching.answer` is the one key-frame pipeline: the teacher's labels, then (in distill
mode) distillation and the UPDATE, else the labels encoded as LABELS. Design:
docs/design/teaching.md.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol, TypeVar

import numpy as np

from services.server.metrics.server_metrics import ServerMetrics
from services.server.teaching.distillation import Distillation
from services.server.teaching.session import EdgeSession
from services.server.teaching.teacher_queue import TeacherFailed, TeacherQueue, TeacherResult
from shadowtutor.algorithms.distill import Distiller, DistillResult
from shadowtutor.protocol.codecs import encode_labels
from shadowtutor.protocol.errors import ErrorCode, ProtocolError
from shadowtutor.protocol.messages import Hello, KeyFrame, Labels, Update, Welcome

T = TypeVar("T")


class SessionEnded(ProtocolError):
    """The teaching cannot go on with this session (e.g. its checkpoint is refused): the edge gets
    a fatal ERROR saying why and the connection closes; the edge's next session starts fresh."""


class Teaching(Protocol):
    """A session's model work, wherever it runs. The connection calls it one request at a time per
    session, in arrival order; every method may raise :class:`SessionEnded` to end the session."""

    async def describe(self) -> dict[str, Any]:
        """``class_names`` (list), ``teacher`` and ``where``: what ``/readyz`` shows; raises while
        unavailable."""
        ...

    async def new_student(
        self, hello: Hello, student_size: tuple[int, int] | None
    ) -> Distiller | None:
        """The student a new session of ``hello`` trains in this process (at ``student_size``; None:
        the frame's size), or None: a naive session, or a student held elsewhere."""
        ...

    async def open(self, session: EdgeSession) -> Welcome:
        """The WELCOME of a new session (full weights in distill mode)."""
        ...

    async def resume(self, session: EdgeSession) -> Welcome | None:
        """The WELCOME (``resumed``, no weights) that goes on with ``session``: a session of the
        same edge id, session id and agreement whose state the teaching still holds at
        ``session.version``; None where it does not (the caller opens a new session)."""
        ...

    async def key_frame(
        self, session: EdgeSession, key_frame: KeyFrame, frame: np.ndarray
    ) -> Update | Labels:
        """The answer to a checked, decoded key frame, with the session's version and statistics
        counted; raises ``ProtocolError`` or ``TeacherFailed`` for an error that answers only this
        key frame."""
        ...

    async def resync(self, session: EdgeSession, have_version: int) -> Update:
        """The full weights for an edge that holds ``have_version``."""
        ...


class TeachingModels(Protocol):
    """What :class:`LocalTeaching` works with: the models a ``ServerRuntime`` installs (None before
    they are installed and after they stop) and the pool model work runs in."""

    teacher_queue: TeacherQueue | None
    distillation: Distillation | None
    distill_pool: ThreadPoolExecutor
    metrics: ServerMetrics

    def new_distiller(self, student_size: tuple[int, int] | None = None) -> Distiller: ...

    def readiness(self) -> dict[str, Any]: ...


class LocalTeaching:
    """Teaching in this process, on ``models``' teacher queue and distillation engine.

    Owns no state of its own: the session holds its student, the models their queues. Called by
    the WebSocket connection of a one-process server and by a Ray Serve teaching replica. Model
    work runs in ``models.distill_pool`` or the engine, never on the event loop.
    """

    def __init__(self, models: TeachingModels) -> None:
        self.models = models

    async def describe(self) -> dict[str, Any]:
        readiness = self.models.readiness()
        if not readiness["ready"]:
            raise RuntimeError(readiness["reason"])
        return {
            "class_names": readiness["class_names"],
            "teacher": readiness["teacher"],
            "device": readiness["device"],
            "where": f"this process ({readiness['device']})",
        }

    async def new_student(
        self, hello: Hello, student_size: tuple[int, int] | None
    ) -> Distiller | None:
        if hello.mode != "distill":
            return None
        return await self._in_pool(self.models.new_distiller, student_size)

    async def open(self, session: EdgeSession) -> Welcome:
        return await self._in_pool(session.welcome)

    async def resume(self, session: EdgeSession) -> Welcome | None:
        """None: a session of this process lives only as long as its connection."""
        return None

    async def key_frame(
        self, session: EdgeSession, key_frame: KeyFrame, frame: np.ndarray
    ) -> Update | Labels:
        answer, _ = await self.answer(
            session,
            frame,
            seq=key_frame.seq,
            frame_index=key_frame.frame_index,
            base_version=key_frame.base_version,
        )
        return answer

    async def resync(self, session: EdgeSession, have_version: int) -> Update:
        return await self._in_pool(session.resync, have_version)

    async def answer(
        self,
        session: EdgeSession | None,
        frame: np.ndarray,
        *,
        seq: int,
        frame_index: int,
        base_version: int,
    ) -> tuple[Update | Labels, DistillResult | None]:
        """The answer to key frame ``seq`` (a writable BGR ``frame``) with the training it reports:
        the UPDATE of ``session``'s student trained on the teacher's labels, or those labels as
        LABELS (no training: None) where the session has no student (or there is no session).
        Counts the session's statistics and the distillation metrics. Raises ``TeacherFailed``
        (this key frame only) and :class:`SessionEnded` when the engine has stopped."""
        labelled = await self._label(frame, frame_index)
        teacher_ms = labelled.seconds * 1000.0
        if session is not None:
            session.stats.labelled += 1
            session.stats.teacher_seconds += labelled.seconds
        if session is None or session.distiller is None:
            payload = await asyncio.to_thread(encode_labels, labelled.labels, "png")
            height, width = frame.shape[:2]
            labels = Labels(
                seq=seq,
                frame_index=frame_index,
                codec="png",
                width=width,
                height=height,
                teacher_ms=teacher_ms,
                payload=payload,
            )
            return labels, None
        distillation = self.models.distillation
        if distillation is None:
            raise SessionEnded(
                ErrorCode.SERVER_BUSY, "distillation is not available (the server is shutting down)"
            )
        result, seconds = await distillation.train(
            session.distiller, frame, labelled.labels, labelled.boxes
        )
        update = await self._in_pool(
            functools.partial(
                session.trained,
                seq,
                result,
                seconds,
                base_version,
                teacher_ms,
                key_frame=(frame, labelled.labels, labelled.boxes),
            )
        )
        metrics = self.models.metrics
        metrics.distill_latency.observe(update.distill_ms / 1000.0)
        metrics.distill_steps.inc(update.steps)
        info = session.info()
        if info.downlink_bps is not None:
            metrics.fleet.updates(
                session.hello.edge_id,
                info.downlink_budget_bps,
                info.downlink_bps,
                info.updates_held_back,
            )
        return update, result

    async def _label(self, frame: np.ndarray, frame_index: int) -> TeacherResult:
        queue = self.models.teacher_queue
        if queue is None:
            raise TeacherFailed("the teacher is not available (the server is shutting down)")
        return await queue.label(frame, frame_index)

    async def _in_pool(self, fn: Callable[..., T], *args: Any) -> T:
        """Run ``fn(*args)`` in the distillation pool, off the event loop."""
        return await asyncio.get_running_loop().run_in_executor(self.models.distill_pool, fn, *args)
