"""What a session's model work goes through: one :class:`Teaching` interface, chosen when the server
starts (the app factory takes one; ``shadowtutor serve`` picks which).

The server's runtime asks its teaching whether it is ready and for its :class:`Description`; the
WebSocket connection (``services.server.connections.ws_edge``) checks and decodes each message,
then asks the teaching for a session's student, its WELCOME, the answer to a key frame and the full
weights of a resync, without knowing where that work runs:

* :class:`LocalTeaching`: the models of this process (:class:`TeachingModels`), loaded by it;
* ``services.ray_serve.client.ServeTeaching``: a Ray Serve teaching deployment, whose replicas run
  a :class:`LocalTeaching` of their own (``services.ray_serve.teaching``).

:meth:`LocalTeaching.answer` is the one key-frame pipeline: the teacher's labels, then (in distill
mode) distillation and the UPDATE, else the labels encoded as LABELS. Design:
docs/design/teaching.md.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable
from concurrent.futures import Executor, ThreadPoolExecutor
from typing import Any, Protocol, TypeVar

import numpy as np

from services.server.metrics.server_metrics import ServerMetrics
from services.server.settings import ServerSettings
from services.server.teaching.description import Description
from services.server.teaching.loading import LoadedModels, load_models
from services.server.teaching.models import TeachingModels
from services.server.teaching.session import EdgeSession
from services.server.teaching.teacher_queue import TeacherFailed, TeacherResult
from shadowtutor.algorithms.distill import Distiller, DistillResult
from shadowtutor.protocol.codecs import encode_labels
from shadowtutor.protocol.errors import ErrorCode, ProtocolError
from shadowtutor.protocol.messages import Hello, KeyFrame, Labels, Update, Welcome
from shadowtutor.teachers.base import Teacher

T = TypeVar("T")
log = logging.getLogger(__name__)


class SessionEnded(ProtocolError):
    """The teaching cannot go on with this session (e.g. its checkpoint is refused): the edge gets
    a fatal ERROR saying why and the connection closes; the edge's next session starts fresh."""


async def in_pool(pool: Executor, fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)`` run in ``pool``, off the event loop."""
    return await asyncio.get_running_loop().run_in_executor(pool, fn, *args)


class Teaching(Protocol):
    """A session's model work, wherever it runs. Started and stopped with the server; the
    connection calls it one request at a time per session, in arrival order; every session method
    may raise :class:`SessionEnded` to end the session."""

    @property
    def description(self) -> Description | None:
        """What the ready teaching is; None until it is ready (and after it stops)."""
        ...

    @property
    def not_ready_reason(self) -> str:
        """Why it is not ready (loading, waiting, failed, stopped); empty once ready."""
        ...

    def start(self) -> None:
        """Begin becoming ready, in the running loop; returns at once."""
        ...

    async def stop(self) -> None:
        """End the model work; sessions' waiting requests fail."""
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
        counted; raises ``ProtocolError`` (``TeacherFailed`` among them) for an error that answers
        only this key frame."""
        ...

    async def resync(self, session: EdgeSession, have_version: int) -> Update:
        """The full weights for an edge that holds ``have_version``."""
        ...


class LocalTeaching:
    """Teaching in this process: it loads the models (``loaded`` if given; else from ``settings``,
    with ``teacher`` if given, in the background once started) and holds them at work
    (:attr:`models`, None until then). :meth:`install` makes it ready at once.

    Holds no session state: the session holds its student. Used by the WebSocket connection of a
    one-process server and by a Ray Serve teaching replica. Model work runs in :attr:`pool` or the
    engine, never on the event loop.
    """

    def __init__(
        self,
        settings: ServerSettings,
        metrics: ServerMetrics,
        *,
        teacher: Teacher | None = None,
        loaded: LoadedModels | None = None,
    ) -> None:
        self.settings = settings
        self.metrics = metrics
        self.params = settings.algorithm_params()
        self.pool = ThreadPoolExecutor(
            settings.distill_workers, thread_name_prefix="shadowtutor-distill"
        )
        self.models: TeachingModels | None = None
        self.not_ready_reason = "the server is starting"
        self._teacher = teacher
        self._loaded = loaded
        self._loader: asyncio.Task[None] | None = None

    @property
    def description(self) -> Description | None:
        models = self.models
        return None if models is None else models.describe(f"this process ({models.device})")

    def start(self) -> None:
        """Install the given models now, or load them in the background (``/readyz`` tells the
        progress or the failure)."""
        if self._loaded is not None:
            self.install(self._loaded)
        else:
            self._loader = asyncio.get_running_loop().create_task(self._load(), name="load-models")

    def install(self, loaded: LoadedModels) -> None:
        """Put ``loaded`` to work (in the running loop): ready from here on."""
        self.models = TeachingModels(loaded, self.settings, self.metrics, self.pool)
        self.not_ready_reason = ""

    async def _load(self) -> None:
        def progress(step: str) -> None:
            self.not_ready_reason = step

        try:
            loaded = await asyncio.to_thread(load_models, self.settings, self._teacher, progress)
        # any loading failure: report it on /readyz and in the log
        except Exception as exc:
            self.not_ready_reason = f"loading failed: {exc}"
            log.error("the server cannot become ready: %s", exc, exc_info=True)
            return
        self.install(loaded)

    async def stop(self) -> None:
        if self._loader is not None:
            self._loader.cancel()
            await asyncio.wait({self._loader})
        models, self.models = self.models, None
        self.not_ready_reason = "the server is shutting down"
        if models is not None:
            await models.stop()
        self.pool.shutdown(wait=False, cancel_futures=True)

    def new_distiller(self, student_size: tuple[int, int] | None = None) -> Distiller:
        """A fresh copy of the base student (:meth:`TeachingModels.new_distiller`); raises
        RuntimeError before the models are installed."""
        if self.models is None:
            raise RuntimeError("the student is not loaded yet")
        return self.models.new_distiller(student_size)

    async def new_student(
        self, hello: Hello, student_size: tuple[int, int] | None
    ) -> Distiller | None:
        if hello.mode != "distill":
            return None
        return await in_pool(self.pool, self.new_distiller, student_size)

    async def open(self, session: EdgeSession) -> Welcome:
        return await in_pool(self.pool, session.welcome)

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
        return await in_pool(self.pool, session.resync, have_version)

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
            session.stats.count_labels(labelled.seconds)
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
        if self.models is None:
            raise SessionEnded(
                ErrorCode.SERVER_BUSY, "distillation is not available (the server is shutting down)"
            )
        result, seconds = await self.models.distillation.train(
            session.distiller, frame, labelled.labels, labelled.boxes
        )
        update = await in_pool(
            self.pool,
            functools.partial(
                session.trained,
                seq,
                result,
                seconds,
                base_version,
                teacher_ms,
                key_frame=(frame, labelled.labels, labelled.boxes),
            ),
        )
        self.metrics.distill_latency.observe(update.distill_ms / 1000.0)
        self.metrics.distill_steps.inc(update.steps)
        info = session.info()
        if info.downlink_bps is not None:
            self.metrics.fleet.updates(
                session.hello.edge_id,
                info.downlink_budget_bps,
                info.downlink_bps,
                info.updates_held_back,
            )
        return update, result

    async def _label(self, frame: np.ndarray, frame_index: int) -> TeacherResult:
        if self.models is None:
            raise TeacherFailed("the teacher is not available (the server is shutting down)")
        return await self.models.teacher_queue.label(frame, frame_index)
