"""How the server runs Algorithm 1 for its sessions: one interface, two ways.

* :class:`PooledDistillation`: each key frame through its session's own ``Distiller.train`` in the
  distillation thread pool (sessions in parallel up to ``distill_workers``). The CPU default: the
  sequential path trains the fused tail, a CPU speed-up.
* :class:`BatchedDistillation`: each key frame is prepared on the host (resized, its loss weights
  computed, pinned on CUDA) in a thread pool, then queues for ``distill_engines`` engine threads; an
  engine that is free uploads and trains as one batch what is queued, together with the key frames
  then still in preparation
  (:func:`~shadowtutor.algorithms.batched_distill.distill_batch`, at most ``distill_batch_size`` key
  frames, the sessions' convolutions computed as ``distill_convolution`` says). The GPU default: one
  batched run keeps the device busy where a session at a time leaves it idle between small
  kernels, and the next batch's host work runs in parallel beside it. With several engines, one
  batch's host work (Python, autograd, launches) runs beside another's GPU work.

Both give each session the result its own ``Distiller.train`` would; each returns the result with
the seconds the key frame spent from submission to its result.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from concurrent.futures import Executor, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Literal, Protocol

import numpy as np
import torch

from services.server.metrics.server_metrics import ServerMetrics
from services.server.settings import DistillEngine, DistillTail
from shadowtutor.algorithms.batched_distill import KeyFrameJob, distill_batch
from shadowtutor.algorithms.distill import Distiller, DistillResult
from shadowtutor.algorithms.engine_options import Convolution, Objective

log = logging.getLogger(__name__)


class Distillation(Protocol):
    """Runs Algorithm 1 on one session's key frame; a session has at most one key frame in
    flight."""

    def start(self) -> None: ...

    async def stop(self) -> None: ...

    async def train(
        self, distiller: Distiller, frame: np.ndarray, labels: np.ndarray, boxes: np.ndarray | None
    ) -> tuple[DistillResult, float]:
        """``(result, seconds)``: the distiller has been trained on the key frame; ``seconds`` from
        submission to result. Raises what training raises (ValueError for a frame and labels that
        differ)."""
        ...


class PooledDistillation:
    """Each key frame through its own ``Distiller.train`` in ``pool``."""

    def __init__(self, pool: ThreadPoolExecutor) -> None:
        self.pool = pool

    def start(self) -> None:
        return None

    async def stop(self) -> None:
        return None

    async def train(
        self, distiller: Distiller, frame: np.ndarray, labels: np.ndarray, boxes: np.ndarray | None
    ) -> tuple[DistillResult, float]:
        start = time.perf_counter()
        result = await asyncio.get_running_loop().run_in_executor(
            self.pool, distiller.train, frame, labels, boxes
        )
        return result, time.perf_counter() - start


@dataclass
class _Pending:
    """A key frame waiting in the batched engine's queue, with the future its session awaits."""

    job: KeyFrameJob
    future: asyncio.Future[tuple[DistillResult, float]]
    submitted_at: float
    queued_at: float = field(default_factory=time.perf_counter)


class BatchedDistillation:
    """Key frames of every session, prepared in ``prepare_pool`` (None: the event loop's default
    executor), queue for ``engines`` engine threads that train them in batches. A batch starts when
    an engine is free and a key frame is queued; it takes the queued key frames and those that were
    in preparation at that moment, never a session that another engine is training (its key frame
    waits for that batch to end)."""

    def __init__(
        self,
        metrics: ServerMetrics,
        max_batch: int,
        convolution: Convolution = "grouped",
        graphs: bool = False,
        prepare_pool: Executor | None = None,
        engines: int = 1,
        objective: Objective = "eager",
    ) -> None:
        if max_batch < 1:
            raise ValueError(f"max_batch must be >= 1, got {max_batch}")
        if engines < 1:
            raise ValueError(f"engines must be >= 1, got {engines}")
        self.metrics = metrics
        self.max_batch = max_batch
        self.convolution = convolution
        self.graphs = graphs
        self.objective = objective
        self.prepare_pool = prepare_pool
        self.engines = engines
        metrics.engine_batch_limit.set(max_batch)
        self._queue: asyncio.Queue[_Pending] = asyncio.Queue()
        self._executor = ThreadPoolExecutor(
            max_workers=engines, thread_name_prefix="shadowtutor-engine"
        )
        self._worker: asyncio.Task[None] | None = None
        self._preparing: set[asyncio.Task[None]] = set()
        self._batches: set[asyncio.Task[None]] = set()
        # ids of the distillers in a running batch
        self._training: set[int] = set()
        self._free_engines: asyncio.Semaphore | None = None
        self._batch_ended: asyncio.Event | None = None

    def start(self) -> None:
        if self._worker is None:
            self._free_engines = asyncio.Semaphore(self.engines)
            self._batch_ended = asyncio.Event()
            self._worker = asyncio.get_running_loop().create_task(
                self._run(), name="distill-engine"
            )

    async def stop(self) -> None:
        for task in list(self._preparing):
            task.cancel()
        running = [t for t in (self._worker, *self._batches) if t is not None]
        for task in running:
            task.cancel()
        if running:
            await asyncio.wait(running)
        self._worker = None
        while not self._queue.empty():
            pending = self._queue.get_nowait()
            if not pending.future.done():
                pending.future.cancel()
        self._executor.shutdown(wait=False, cancel_futures=True)

    async def train(
        self, distiller: Distiller, frame: np.ndarray, labels: np.ndarray, boxes: np.ndarray | None
    ) -> tuple[DistillResult, float]:
        if self._worker is None:
            raise RuntimeError("the distillation engine is not started")
        submitted = time.perf_counter()
        loop = asyncio.get_running_loop()
        future: asyncio.Future[tuple[DistillResult, float]] = loop.create_future()
        task = loop.create_task(self._prepare(distiller, frame, labels, boxes, future, submitted))
        self._preparing.add(task)
        task.add_done_callback(self._preparing.discard)
        return await future

    async def _prepare(
        self,
        distiller: Distiller,
        frame: np.ndarray,
        labels: np.ndarray,
        boxes: np.ndarray | None,
        future: asyncio.Future[tuple[DistillResult, float]],
        submitted: float,
    ) -> None:
        """Prepare one key frame in the pool and queue it; its failure is ``future``'s (a caller
        that went away meanwhile has cancelled ``future``: nothing is queued)."""
        loop = asyncio.get_running_loop()
        try:
            job = await loop.run_in_executor(
                self.prepare_pool, KeyFrameJob.prepare, distiller, frame, labels, boxes
            )
        except Exception as exc:
            if not future.done():
                future.set_exception(exc)
            return
        if not future.done():
            self._queue.put_nowait(_Pending(job, future, submitted))

    def _take_batch(self, first: _Pending) -> list[_Pending]:
        """``first`` and what else is queued, up to ``max_batch`` with one key frame per distiller
        and none of a distiller in a running batch (those wait, queued, for a later batch); sessions
        that went away are dropped. May be empty."""
        batch: list[_Pending] = []
        held: list[_Pending] = []
        seen = set(self._training)
        pending: _Pending | None = first
        while pending is not None:
            if pending.future.done():
                # its session went away
                pass
            elif id(pending.job.distiller) in seen:
                held.append(pending)
            else:
                seen.add(id(pending.job.distiller))
                batch.append(pending)
            more = len(batch) < self.max_batch and not self._queue.empty()
            pending = self._queue.get_nowait() if more else None
        for pending in held:
            self._queue.put_nowait(pending)
        return batch

    async def _next_batch(self) -> list[_Pending]:
        """The next batch to train: waits for a queued key frame (and those in preparation then),
        and, where every queued one belongs to a session in a running batch (a session with one key
        frame in flight never causes it), for a batch to end."""
        assert self._batch_ended is not None
        while True:
            first = await self._queue.get()
            # key frames already submitted join this batch rather than wait for the next
            if self._preparing:
                await asyncio.wait(set(self._preparing))
            batch = self._take_batch(first)
            if batch:
                return batch
            # held: their sessions are training
            if not self._queue.empty():
                self._batch_ended.clear()
                await self._batch_ended.wait()

    async def _run(self) -> None:
        """Forms batches while an engine is free, each trained in a task of its own."""
        assert self._free_engines is not None
        loop = asyncio.get_running_loop()
        while True:
            await self._free_engines.acquire()
            try:
                batch = await self._next_batch()
            except BaseException:
                self._free_engines.release()
                raise
            self._training.update(id(p.job.distiller) for p in batch)
            task = loop.create_task(self._train(batch), name="distill-batch")
            self._batches.add(task)
            task.add_done_callback(functools.partial(self._batch_finished, batch))

    def _batch_finished(self, batch: list[_Pending], task: asyncio.Task[None]) -> None:
        """However ``task`` (training ``batch``) ended, even cancelled before it ran: its engine and
        sessions are free, and a key frame it did not answer (the engine stopped) is cancelled."""
        assert self._free_engines is not None and self._batch_ended is not None
        self._batches.discard(task)
        self._training.difference_update(id(p.job.distiller) for p in batch)
        self._free_engines.release()
        self._batch_ended.set()
        for pending in batch:
            if not pending.future.done():
                pending.future.cancel()

    async def _train(self, batch: list[_Pending]) -> None:
        """Train ``batch`` in an engine thread and answer each key frame."""
        started = time.perf_counter()
        self.metrics.engine_batches_running.inc()
        self.metrics.engine_batch_size.observe(len(batch))
        for pending in batch:
            self.metrics.engine_queue_wait.observe(started - pending.queued_at)
        try:
            outcomes = await asyncio.get_running_loop().run_in_executor(
                self._executor, self._train_all, batch
            )
        finally:
            self.metrics.engine_batches_running.dec()
        done = time.perf_counter()
        for pending, outcome in zip(batch, outcomes, strict=True):
            if pending.future.done():
                continue
            if isinstance(outcome, BaseException):
                pending.future.set_exception(outcome)
            else:
                pending.future.set_result((outcome, done - pending.submitted_at))

    def _train_all(self, batch: list[_Pending]) -> list[DistillResult | BaseException]:
        """Runs in the engine thread. A batch that runs out of device memory is trained in two
        halves, and later batches are held to the half (no distiller changes before a batch ends, so
        nothing is lost); any other failing batch is retried one key frame at a time, so that a bad
        key frame fails only its own session."""
        try:
            return list(
                distill_batch([p.job for p in batch], self.convolution, self.graphs, self.objective)
            )
        except Exception as exc:
            if len(batch) == 1:
                return [exc]
            if not isinstance(exc, torch.OutOfMemoryError):
                log.warning(
                    "a distillation batch of %d failed (%s); training one by one", len(batch), exc
                )
                return [self._train_all([pending])[0] for pending in batch]
        # out of memory: retried outside the handler, which holds the failed batch's frames
        half = len(batch) // 2
        self._limit_batch(len(batch), half)
        return self._train_all(batch[:half]) + self._train_all(batch[half:])

    def _limit_batch(self, failed: int, limit: int) -> None:
        """Hold later batches to ``limit`` key frames after a batch of ``failed`` ran out of device
        memory."""
        if limit < self.max_batch:
            log.warning(
                "a distillation batch of %d key frames ran out of device memory: batches now hold "
                "at most %d (set --distill-batch-size to keep it)",
                failed,
                limit,
            )
            self.max_batch = limit
            self.metrics.engine_batch_limit.set(limit)
        if torch.cuda.is_available():
            # the failed batch's cached blocks back to the device, for the halves
            torch.cuda.empty_cache()


def resolve_engine(engine: DistillEngine, device_type: str) -> Literal["batched", "sequential"]:
    """``auto``: batched on an accelerator, sequential (the fused tail) on a CPU."""
    if engine == "auto":
        return "sequential" if device_type == "cpu" else "batched"
    return engine


def resolve_tail(tail: DistillTail, device_type: str, engine: DistillEngine) -> bool:
    """Whether distillation trains the fused tail. ``auto``: fused on a CPU and under the batched
    engine, whose batch of sessions makes the fused tail's many small kernels large (about 3x the
    tail as written at 1280x720 and 64 sessions on an H100: docs/results/server_gpu/README.md); as
    written for a session at a time on an accelerator, where those small kernels leave it idle."""
    if tail == "auto":
        return device_type == "cpu" or resolve_engine(engine, device_type) == "batched"
    return tail == "fused"


def make_distillation(
    engine: DistillEngine,
    device_type: str,
    metrics: ServerMetrics,
    pool: ThreadPoolExecutor,
    max_batch: int,
    convolution: Convolution = "grouped",
    graphs: bool = False,
    engines: int = 1,
    objective: Objective = "eager",
) -> Distillation:
    """The engine ``engine`` names for a device of ``device_type`` (not yet started), running in
    ``pool`` (the batched engine: its preparation of key frames); ``max_batch``, ``convolution``,
    ``graphs``, ``engines`` (its engine threads) and ``objective`` apply to the batched engine."""
    if resolve_engine(engine, device_type) == "batched":
        return BatchedDistillation(
            metrics,
            max_batch,
            convolution,
            graphs,
            prepare_pool=pool,
            engines=engines,
            objective=objective,
        )
    return PooledDistillation(pool)
