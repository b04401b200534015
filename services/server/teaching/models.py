"""The models of one process at work (:class:`TeachingModels`): the teacher behind its queue, the
distillation engine, the base student every session copies, and the GPU gauges of their device.

Built from :class:`~services.server.teaching.loading.LoadedModels` in a running event loop (the
queue's and the engine's tasks belong to it) and ready from that moment; :meth:`stop` ends them.
"""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor

from services.server.metrics.gpu import start_gpu_metrics, stop_gpu_metrics
from services.server.metrics.server_metrics import ServerMetrics
from services.server.settings import ServerSettings
from services.server.teaching.description import Description
from services.server.teaching.distillation import make_distillation, resolve_engine, resolve_tail
from services.server.teaching.loading import LoadedModels
from services.server.teaching.teacher_queue import TeacherQueue
from shadowtutor.algorithms.distill import Distiller
from shadowtutor.classes import background_index
from shadowtutor.gpu_usage import GpuUsageSampler
from shadowtutor.models.precision import training_precision

log = logging.getLogger(__name__)


class TeachingModels:
    """``loaded``'s teacher queue and distillation engine, started in the running loop, with the
    base student and the device. The engine prepares key frames in ``pool``; both count into
    ``metrics``."""

    def __init__(
        self,
        loaded: LoadedModels,
        settings: ServerSettings,
        metrics: ServerMetrics,
        pool: ThreadPoolExecutor,
    ) -> None:
        self.settings = settings
        self.teacher = loaded.teacher
        self.base_student = loaded.base_student
        self.device = loaded.device
        self.params = settings.algorithm_params()
        self.distillation = make_distillation(
            settings.distill_engine,
            self.device.type,
            metrics,
            pool,
            settings.distill_batch_size,
            settings.distill_convolution,
            settings.distill_graphs,
            settings.distill_engines,
            settings.distill_objective,
        )
        self.distillation.start()
        self.teacher_queue = TeacherQueue(self.teacher, metrics, settings.teacher_batch_size)
        self.teacher_queue.start()
        self._metrics = metrics
        # feeds the GPU gauges where the device is a GPU
        self.gpu_sampler: GpuUsageSampler | None = start_gpu_metrics(self.device, metrics)
        log.info(
            "ready: teacher %r, student from %s, classes %s, distillation on %s (%s engine)",
            self.teacher_name,
            self.base_student.source,
            list(self.base_student.class_names),
            self.device,
            resolve_engine(settings.distill_engine, self.device.type),
        )

    @property
    def teacher_name(self) -> str:
        return getattr(self.teacher, "name", type(self.teacher).__name__)

    def describe(self, where: str) -> Description:
        """These models as a :class:`Description` of a teaching that runs ``where``."""
        return Description(
            teacher=self.teacher_name,
            class_names=self.base_student.class_names,
            where=where,
            student="fresh" if self.base_student.source == "fresh" else "checkpoint",
            device=str(self.device),
        )

    def new_distiller(self, student_size: tuple[int, int] | None = None) -> Distiller:
        """A fresh copy of the base student with its own optimiser (one per distill session),
        training at ``student_size`` (None: the key frame's size)."""
        settings = self.settings
        return Distiller(
            self.base_student.instantiate(),
            self.params,
            background_index(self.base_student.class_names),
            self.device,
            student_size,
            fuse_tail=resolve_tail(
                settings.distill_tail, self.device.type, settings.distill_engine
            ),
            precision=training_precision(settings.distill_precision, self.device),
        )

    async def stop(self) -> None:
        """End the queue and the engine (their waiting work fails) and the GPU gauges."""
        await self.teacher_queue.stop()
        await self.distillation.stop()
        stop_gpu_metrics(self.gpu_sampler, self._metrics)
        self.gpu_sampler = None
