"""What one running server holds: settings, metrics, sessions, the models and the worker pools.

Models given to the runtime (``shadowtutor serve`` loads them before it listens) are used at
once; without them loading runs in the background after start-up, so that ``/healthz``
answers at once and ``/readyz`` says what is still loading (or why loading failed).
"""

from __future__ import annotations

import asyncio
import logging
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import torch

from services.server.access.admission import Admission
from services.server.access.auth import Authenticator
from services.server.access.credential_gate import CredentialGate
from services.server.access.limits import KeyFrameLimits
from services.server.metrics.gpu import start_gpu_metrics, stop_gpu_metrics
from services.server.metrics.server_metrics import ServerMetrics
from services.server.settings import ServerSettings
from services.server.teaching.distillation import (
    Distillation,
    make_distillation,
    resolve_engine,
    resolve_tail,
)
from services.server.teaching.loading import BaseStudent, LoadedModels, load_models
from services.server.teaching.local import LocalTeaching, Teaching
from services.server.teaching.session import SessionRegistry
from services.server.teaching.teacher_queue import TeacherQueue
from shadowtutor.algorithms.distill import Distiller
from shadowtutor.classes import background_index
from shadowtutor.gpu_usage import GpuUsageSampler
from shadowtutor.models.precision import training_precision
from shadowtutor.protocol.errors import ErrorCode, ProtocolError
from shadowtutor.teachers.base import Teacher

log = logging.getLogger(__name__)


class ServerRuntime:
    """What one server process holds for every connection: its settings and metrics, the teaching
    (local models, or a Ray Serve deployment), the sessions by edge id and admission. Built by the
    app at start; every ``EdgeConnection`` reads it; it starts and stops the teaching with the
    app."""

    def __init__(
        self,
        settings: ServerSettings,
        metrics: ServerMetrics,
        teacher: Teacher | None = None,
        models: LoadedModels | None = None,
        remote: Teaching | None = None,
    ) -> None:
        self.settings = settings
        # teacher and students elsewhere (a Ray Serve deployment): this process holds no model
        self.remote = remote
        # where the sessions' model work runs: chosen here, once
        self.teaching: Teaching = remote if remote is not None else LocalTeaching(self)
        self._remote_described: dict[str, Any] | None = None
        self.metrics = metrics
        self.params = settings.algorithm_params()
        self.sessions = SessionRegistry(settings.max_sessions, metrics)
        self.auth = Authenticator.from_settings(
            settings
            # raises TokenFileError on a bad tokens file
        )
        self.key_frame_limits = KeyFrameLimits(settings.key_frame_rate, settings.key_frame_burst)
        # WebSocket connections open on /v1/edge, HELLO or not
        self.connections = 0
        # room for the connections whose HELLO is not accepted yet
        self.admission = Admission(
            settings.max_unauthenticated_per_source,
            settings.unauthenticated_limit(),
            on_change=metrics.unauthenticated_connections.set,
            on_refusal=lambda reason: metrics.connections_refused.labels(reason=reason).inc(),
        )
        self.teacher: Teacher | None = teacher
        self.teacher_queue: TeacherQueue | None = None
        self.distillation: Distillation | None = None
        self.base_student: BaseStudent | None = None
        self.device = torch.device("cpu")
        self.gpu_sampler: GpuUsageSampler | None = (
            # feeds the GPU gauges where the device is a GPU
            None
        )
        self.not_ready_reason = "the server is starting"
        self.distill_pool = ThreadPoolExecutor(
            settings.distill_workers, thread_name_prefix="shadowtutor-distill"
        )
        # credential checks: pools of their own, apart from frame decoding and from each other
        self.bearer_gate = CredentialGate(
            "shadowtutor-bearer",
            2,
            settings.auth_checks_per_source,
            settings.auth_checks_total,
            settings.auth_failure_delay,
        )
        # admission bounds these connections already
        self.hello_gate = CredentialGate(
            "shadowtutor-hello",
            2,
            settings.max_unauthenticated_per_source,
            max(settings.max_unauthenticated_per_source, settings.unauthenticated_limit()),
            settings.auth_failure_delay,
        )
        self._models = models
        self._loader: asyncio.Task[None] | None = None
        self._token_watch: asyncio.Task[None] | None = None

    @property
    def ready(self) -> bool:
        return self.teacher_queue is not None or self._remote_described is not None

    @property
    def class_names(self) -> tuple[str, ...]:
        if self._remote_described is not None:
            return tuple(self._remote_described["class_names"])
        if self.base_student is None:
            raise RuntimeError("the student is not loaded yet")
        return self.base_student.class_names

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        if self.remote is not None:
            self._loader = loop.create_task(
                self._describe_remote(self.remote), name="describe-remote"
            )
        elif self._models is not None:
            self.install(self._models)
        else:
            self._loader = loop.create_task(self._load(), name="load-models")
        if not self.auth.enabled:
            log.warning(
                "AUTHENTICATION IS OFF: any client can connect as any edge and read /v1/sessions; "
                "configure --tokens-file (shadowtutor token new) for anything beyond a trusted "
                "network"
            )
        elif self.auth.path is not None:
            watch = self.auth.watch(self.evict_revoked, self.settings.tokens_poll_seconds)
            self._token_watch = loop.create_task(watch, name="watch-tokens")

    async def stop(self) -> None:
        for task in (self._loader, self._token_watch):
            if task is not None:
                task.cancel()
                await asyncio.wait({task})
        if self.teacher_queue is not None:
            await self.teacher_queue.stop()
            self.teacher_queue = None
        if self.distillation is not None:
            await self.distillation.stop()
            self.distillation = None
        self.metrics.teacher_ready.set(0)
        stop_gpu_metrics(self.gpu_sampler, self.metrics)
        self.gpu_sampler = None
        self.not_ready_reason = "the server is shutting down"
        self.distill_pool.shutdown(wait=False, cancel_futures=True)
        self.bearer_gate.close()
        self.hello_gate.close()

    async def _load(self) -> None:
        def progress(step: str) -> None:
            self.not_ready_reason = step

        try:
            models = await asyncio.to_thread(load_models, self.settings, self.teacher, progress)
        # any loading failure: report it on /readyz and in the log
        except Exception as exc:
            self.not_ready_reason = f"loading failed: {exc}"
            log.error("the server cannot become ready: %s", exc, exc_info=True)
            return
        self.install(models)

    async def _describe_remote(self, remote: Teaching) -> None:
        """Ready once the remote teaching answers with its classes (retried while it starts)."""
        while True:
            try:
                described = await remote.describe()
            # not up yet (replicas still loading their models): ask again
            except Exception as exc:
                self.not_ready_reason = f"waiting for the teaching deployment: {exc}"
                await asyncio.sleep(1.0)
                continue
            self._remote_described = described
            self.not_ready_reason = ""
            self.metrics.teacher_ready.set(1)
            log.info(
                "ready: teaching on %s (teacher %r, classes %s)",
                described.get("where"),
                described.get("teacher"),
                described.get("class_names"),
            )
            return

    def install(self, models: LoadedModels) -> None:
        """Put ``models`` to work: the teacher queue, the distillation engine, the GPU gauges (in
        the running loop)."""
        self.teacher, self.base_student, self.device = (
            models.teacher,
            models.base_student,
            models.device,
        )
        queue = TeacherQueue(self.teacher, self.metrics, self.settings.teacher_batch_size)
        distillation = make_distillation(
            self.settings.distill_engine,
            self.device.type,
            self.metrics,
            self.distill_pool,
            self.settings.distill_batch_size,
            self.settings.distill_convolution,
            self.settings.distill_graphs,
            self.settings.distill_engines,
            self.settings.distill_objective,
        )
        distillation.start()
        self.distillation = distillation
        queue.start()
        self.teacher_queue = queue
        self.gpu_sampler = start_gpu_metrics(self.device, self.metrics)
        self.not_ready_reason = ""
        self.metrics.teacher_ready.set(1)
        log.info(
            "ready: teacher %r, student from %s, classes %s, distillation on %s (%s engine)",
            self.teacher.name,
            self.base_student.source,
            list(self.base_student.class_names),
            self.device,
            resolve_engine(self.settings.distill_engine, self.device.type),
        )

    def evict_revoked(self) -> None:
        """End the sessions of edges that the (reloaded) tokens file no longer admits."""
        for session in self.sessions.all():
            if not self.auth.edge_admitted(session.hello.edge_id):
                log.warning(
                    "edge %r is no longer admitted by the tokens file: ending its session",
                    session.hello.edge_id,
                )
                session.evict(
                    ProtocolError(ErrorCode.UNAUTHORIZED, "this edge's token was revoked")
                )

    def new_distiller(self, student_size: tuple[int, int] | None = None) -> Distiller:
        """A fresh copy of the base student with its own optimiser (one per distill session),
        training at ``student_size`` (None: the key frame's size)."""
        if self.base_student is None:
            raise RuntimeError("the student is not loaded yet")
        student = self.base_student.instantiate()
        fuse_tail = resolve_tail(
            self.settings.distill_tail, self.device.type, self.settings.distill_engine
        )
        return Distiller(
            student,
            self.params,
            background_index(self.class_names),
            self.device,
            student_size,
            fuse_tail=fuse_tail,
            precision=training_precision(self.settings.distill_precision, self.device),
        )

    def readiness(self) -> dict[str, Any]:
        if self._remote_described is not None:
            return {"ready": True, **self._remote_described}
        if (
            not self.ready or self.base_student is None or self.teacher is None
            # ready: the models are installed, the student with them
        ):
            return {"ready": False, "reason": self.not_ready_reason}
        return {
            "ready": True,
            "teacher": self.teacher.name,
            "student": "fresh" if self.base_student.source == "fresh" else "checkpoint",
            "class_names": list(self.class_names),
            "device": str(self.device),
        }
