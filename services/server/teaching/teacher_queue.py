"""One queue for the teacher work of every session.

The teacher runs in a single worker thread (one model, one GPU stream). Requests that
queue up while the teacher is busy are labelled together in one batched call (with the
instances' boxes where the teacher gives them: :meth:`Teacher.teach_batch`);
if a batch fails, its frames are retried one by one so that a bad frame fails only its own
request. A teacher on a CUDA device works on its own CUDA stream, so that its kernels and copies
overlap with distillation's on the default stream (teachers copy their results to the host on
the current stream, which is this one).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from services.server.metrics.server_metrics import ServerMetrics
from shadowtutor.protocol.errors import ErrorCode, ProtocolError
from shadowtutor.teachers.base import Teacher, TeacherAnswer, TeacherError

log = logging.getLogger(__name__)


class TeacherFailed(ProtocolError):
    """The teacher could not label one frame (the message says why): a ``teacher_failed`` ERROR
    that answers that key frame only."""

    def __init__(self, message: str) -> None:
        super().__init__(ErrorCode.TEACHER_FAILED, message)


@dataclass
class TeacherResult:
    """The teacher's labels of one frame, its instance boxes (if any) and the seconds it took."""

    labels: np.ndarray
    # from queueing to labels
    seconds: float
    # the teacher's instance boxes (N, 4), where it gives them
    boxes: np.ndarray | None = None


@dataclass
class _Request:
    """A frame waiting for the teacher, with the future its caller awaits."""

    frame: np.ndarray
    frame_index: int
    future: asyncio.Future[TeacherResult]
    queued_at: float = field(default_factory=time.perf_counter)


class TeacherQueue:
    """The one queue in front of the teacher, shared by every session: frames wait here and are
    labelled in batches of at most ``max_batch`` on one worker thread, so the teacher never runs
    twice at once. ``label`` is awaited by the teaching; a teacher failure fails only the frames of
    that batch."""

    def __init__(self, teacher: Teacher, metrics: ServerMetrics, max_batch: int = 8) -> None:
        if max_batch < 1:
            raise ValueError(f"max_batch must be >= 1, got {max_batch}")
        self.teacher = teacher
        self.metrics = metrics
        self.max_batch = max_batch
        self._queue: asyncio.Queue[_Request] = asyncio.Queue()
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="shadowtutor-teacher")
        self._worker: asyncio.Task[None] | None = None
        self.stream = teacher_stream(teacher)

    def start(self) -> None:
        if self._worker is None:
            self._worker = asyncio.get_running_loop().create_task(self._run(), name="teacher-queue")

    async def stop(self) -> None:
        if self._worker is not None:
            self._worker.cancel()
            await asyncio.wait({self._worker})
            self._worker = None
        pending = [self._queue.get_nowait() for _ in range(self._queue.qsize())]
        _fail_all(pending, TeacherFailed("the server is shutting down"))
        self.metrics.teacher_queue_depth.set(0)
        self._executor.shutdown(wait=False, cancel_futures=True)

    async def label(self, frame: np.ndarray, frame_index: int) -> TeacherResult:
        """Labels for one BGR frame, ``(H, W)`` like the frame; raises :class:`TeacherFailed`."""
        if self._worker is None:
            raise RuntimeError("the teacher queue is not started")
        request = _Request(frame, frame_index, asyncio.get_running_loop().create_future())
        self._queue.put_nowait(request)
        self.metrics.teacher_queue_depth.inc()
        return await request.future

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            batch = [await self._queue.get()]
            while len(batch) < self.max_batch and not self._queue.empty():
                batch.append(self._queue.get_nowait())
            self.metrics.teacher_queue_depth.dec(len(batch))
            self.metrics.teacher_batch_size.observe(len(batch))
            try:
                outcomes = await loop.run_in_executor(self._executor, self._label_all, batch)
            except asyncio.CancelledError:
                _fail_all(batch, TeacherFailed("the server is shutting down"))
                raise
            done = time.perf_counter()
            for request, outcome in zip(batch, outcomes, strict=True):
                # the session went away meanwhile
                if request.future.done():
                    continue
                if isinstance(outcome, TeacherFailed):
                    request.future.set_exception(outcome)
                else:
                    seconds = done - request.queued_at
                    self.metrics.teacher_latency.observe(seconds)
                    request.future.set_result(TeacherResult(outcome.labels, seconds, outcome.boxes))

    def _label_all(self, batch: list[_Request]) -> list[TeacherAnswer | TeacherFailed]:
        """Runs in the teacher thread, on the teacher's CUDA stream if it has one."""
        if self.stream is None:
            return self._label_batch(batch)
        import torch

        with torch.cuda.stream(self.stream):
            return self._label_batch(batch)

    def _label_batch(self, batch: list[_Request]) -> list[TeacherAnswer | TeacherFailed]:
        if len(batch) > 1:
            try:
                taught = self.teacher.teach_batch(
                    [r.frame for r in batch], [r.frame_index for r in batch]
                )
                return [self._checked(r, out) for r, out in zip(batch, taught, strict=True)]
            except Exception as exc:
                # any backend failure: retry one by one to find the bad frame
                log.warning(
                    "teacher batch of %d failed (%s); labelling one by one", len(batch), exc
                )
        return [self._label_one(r) for r in batch]

    def _label_one(self, request: _Request) -> TeacherAnswer | TeacherFailed:
        try:
            return self._checked(
                request, self.teacher.teach_batch([request.frame], [request.frame_index])[0]
            )
        except TeacherFailed as exc:
            return exc
        except Exception as exc:
            # backend errors, out of memory: this frame fails, the queue goes on
            # (a TeacherError refuses the input, e.g. a frame index an edge sent that has no label:
            # no traceback)
            log.warning(
                "teacher failed on frame %d: %s",
                request.frame_index,
                exc,
                exc_info=not isinstance(exc, TeacherError),
            )
            return TeacherFailed(f"the teacher failed on frame {request.frame_index}: {exc}")

    def _checked(self, request: _Request, taught: TeacherAnswer) -> TeacherAnswer:
        """The teacher's answer if it is a label map of the frame's size with known classes (and
        boxes ``(N, 4)`` if any)."""
        labels = np.asarray(taught.labels)
        if labels.shape != request.frame.shape[:2]:
            raise TeacherFailed(
                f"the teacher returned labels of shape {labels.shape} for a frame of "
                f"{request.frame.shape[:2]}"
            )
        num_classes = len(self.teacher.class_names)
        if (
            not np.issubdtype(labels.dtype, np.integer)
            or labels.min() < 0
            or labels.max() >= num_classes
        ):
            raise TeacherFailed(
                f"the teacher returned labels outside 0..{num_classes - 1} ({labels.dtype})"
            )
        boxes = None if taught.boxes is None else np.asarray(taught.boxes, dtype=np.float32)
        if boxes is not None and (
            boxes.ndim != 2 or boxes.shape[1] != 4 or not np.isfinite(boxes).all()
        ):
            raise TeacherFailed(
                f"the teacher returned instance boxes of shape {boxes.shape}, not finite (N, 4)"
            )
        return TeacherAnswer(labels, boxes)


def teacher_stream(teacher: Teacher) -> Any:
    """A new ``torch.cuda.Stream`` on the teacher's device when that is a usable CUDA device, else
    None (CPU teachers)."""
    device = teacher.device
    if device != "cuda" and not device.startswith("cuda:"):
        return None
    with contextlib.suppress(ImportError):
        import torch

        if torch.cuda.is_available():
            return torch.cuda.Stream(device=device)
    return None


def _fail_all(requests: list[_Request], error: TeacherFailed) -> None:
    for request in requests:
        if not request.future.done():
            request.future.set_exception(error)
