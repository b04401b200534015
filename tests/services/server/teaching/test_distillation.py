"""The server's two ways of running Algorithm 1: the batched engine against each session's own
Distiller.train, its batching, failure isolation and metrics; and the engine each device gets."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import torch

from services.server.metrics.server_metrics import ServerMetrics
from services.server.settings import ServerSettings
from services.server.teaching import distillation
from services.server.teaching.distillation import (
    BatchedDistillation,
    PooledDistillation,
    make_distillation,
    resolve_engine,
    resolve_tail,
)
from shadowtutor.algorithms.distill import Distiller
from shadowtutor.algorithms.engine_options import CONVOLUTIONS, Convolution, Objective
from shadowtutor.algorithms.params import AlgorithmParams
from shadowtutor.models.student import StudentNet
from tests.support.prometheus import sample_value

SIZE = (32, 48)


def _key_frame(seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    frame = rng.integers(60, 200, (*SIZE, 3), dtype=np.uint8)
    label = np.zeros(SIZE, np.uint8)
    label[4 + seed % 8:18 + seed % 8, 6:24] = 1
    frame[label == 1] //= 3
    return frame, label


def _distillers(count: int, threshold: float = 0.97) -> list[Distiller]:
    torch.manual_seed(0)
    base = StudentNet(num_classes=2).double()
    params = AlgorithmParams(threshold=threshold, max_updates=3)
    return [Distiller(copy.deepcopy(base), params, background=0, fuse_tail=False) for _ in range(count)]


async def _train_all(engine: BatchedDistillation, distillers: list[Distiller], frames: list) -> list:
    engine.start()
    try:
        return await asyncio.gather(
            *(engine.train(d, f, lab, None) for d, (f, lab) in zip(distillers, frames, strict=True)),
            return_exceptions=True,
        )
    finally:
        await engine.stop()


def _engine_calls(monkeypatch: pytest.MonkeyPatch, fits: int | None = None) -> list[tuple[int, str]]:
    """Record the engine's calls of distill_batch as (key frames, convolution), and that none asks for CUDA graphs;
    with ``fits``, a batch of more key frames raises torch.OutOfMemoryError, as the CUDA allocator does (no GPU
    here: a stand-in)."""
    calls: list[tuple[int, str]] = []
    original = distillation.distill_batch

    def recording(jobs: list, convolution: Convolution = "grouped", graphs: bool = False,
                  objective: Objective = "eager") -> list:
        calls.append((len(jobs), convolution))
        assert not graphs
        if fits is not None and len(jobs) > fits:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return original(jobs, convolution, graphs, objective)

    monkeypatch.setattr(distillation, "distill_batch", recording)
    return calls


def _assert_as_alone(got: list, want: list, alone: list[Distiller], batched: list[Distiller]) -> None:
    """Each session's result and student are those of its own Distiller.train."""
    for (result, seconds), expected, a, b in zip(got, want, alone, batched, strict=True):
        assert (result.steps, result.metric) == (expected.steps, pytest.approx(expected.metric, abs=1e-12))
        assert seconds > 0
        for key, tensor in a.student.state_dict().items():
            torch.testing.assert_close(b.student.state_dict()[key], tensor, rtol=0, atol=1e-6)


@pytest.mark.parametrize("convolution", CONVOLUTIONS)
def test_queued_key_frames_of_many_sessions_train_as_one_batch_with_each_sessions_result(
    convolution: Convolution, monkeypatch: pytest.MonkeyPatch
) -> None:
    metrics = ServerMetrics()
    alone, batched = _distillers(6), _distillers(6)
    frames = [_key_frame(s) for s in range(6)]
    want = [d.train(f, lab) for d, (f, lab) in zip(alone, frames, strict=True)]
    calls = _engine_calls(monkeypatch)
    with ThreadPoolExecutor(1) as pool:
        engine = make_distillation("batched", "cpu", metrics, pool, 64, convolution)
        assert isinstance(engine, BatchedDistillation)
        got = asyncio.run(_train_all(engine, batched, frames))
    assert calls == [(6, convolution)]
    _assert_as_alone(got, want, alone, batched)
    text = metrics.exposition().decode()
    assert sample_value(text, "shadowtutor_server_engine_batch_size_count") == 1  # all six in one batch
    assert sample_value(text, "shadowtutor_server_engine_batch_size_sum") == 6
    assert sample_value(text, "shadowtutor_server_engine_queue_wait_seconds_count") == 6


def test_a_batch_never_holds_two_key_frames_of_one_session() -> None:
    metrics = ServerMetrics()
    distiller = _distillers(1)[0]
    frames = [_key_frame(0), _key_frame(1)]
    got = asyncio.run(_train_all(BatchedDistillation(metrics, max_batch=8), [distiller, distiller], frames))
    assert all(not isinstance(g, BaseException) for g in got)
    assert sample_value(metrics.exposition().decode(), "shadowtutor_server_engine_batch_size_count") == 2


def test_the_batch_size_is_bounded() -> None:
    metrics = ServerMetrics()
    distillers = _distillers(5)
    asyncio.run(_train_all(BatchedDistillation(metrics, max_batch=2), distillers, [_key_frame(s) for s in range(5)]))
    text = metrics.exposition().decode()
    assert sample_value(text, "shadowtutor_server_engine_batch_size_count") == 3  # 2 + 2 + 1
    assert sample_value(text, "shadowtutor_server_engine_batch_size_bucket", le="2.0") == 3


def test_a_bad_key_frame_fails_only_its_own_session() -> None:
    distillers = _distillers(3)
    frames = [_key_frame(s) for s in range(3)]
    frames[1] = (frames[1][0], frames[1][1][:-2])  # labels that do not fit the frame
    got = asyncio.run(_train_all(BatchedDistillation(ServerMetrics(), max_batch=8), distillers, frames))
    assert isinstance(got[1], ValueError) and "differ in size" in str(got[1])
    assert not isinstance(got[0], BaseException) and not isinstance(got[2], BaseException)


def _concurrent_calls(
    monkeypatch: pytest.MonkeyPatch, meet: int, metrics: ServerMetrics | None = None
) -> tuple[list[set[int]], list[float]]:
    """Record, per call of distill_batch, the ids of the distillers of every batch running at that moment (its
    own included) and, with ``metrics``, the gauge of running batches once ``meet`` calls ran at once (each call
    waits up to 2 s for them), then train as the engine does."""
    original = distillation.distill_batch
    lock = threading.Lock()
    running: list[set[int]] = []
    seen: list[set[int]] = []
    gauges: list[float] = []
    together = threading.Barrier(meet)

    def recording(jobs: list, convolution: Convolution = "grouped", graphs: bool = False,
                  objective: Objective = "eager") -> list:
        mine = {id(job.distiller) for job in jobs}
        with lock:
            running.append(mine)
            seen.append(set().union(*running))
            overlapping = sum(len(r) for r in running) != len(set().union(*running))
        assert not overlapping, "a distiller in two running batches"
        with contextlib.suppress(threading.BrokenBarrierError):
            together.wait(timeout=2)
        if metrics is not None:
            gauges.append(sample_value(metrics.exposition().decode(), "shadowtutor_server_engine_batches_running"))
        try:
            return original(jobs, convolution, graphs, objective)
        finally:
            with lock:
                running.remove(mine)

    monkeypatch.setattr(distillation, "distill_batch", recording)
    return seen, gauges


def test_two_engines_train_two_batches_at_once_with_each_sessions_result(monkeypatch: pytest.MonkeyPatch) -> None:
    alone, batched = _distillers(4), _distillers(4)
    frames = [_key_frame(s) for s in range(4)]
    want = [d.train(f, lab) for d, (f, lab) in zip(alone, frames, strict=True)]
    metrics = ServerMetrics()
    seen, gauges = _concurrent_calls(monkeypatch, meet=2, metrics=metrics)
    with ThreadPoolExecutor(2) as pool:
        engine = make_distillation("batched", "cpu", metrics, pool, 2, engines=2)
        got = asyncio.run(_train_all(engine, batched, frames))
    assert len(seen) == 2 and len(seen[1]) == 4  # the second batch began while the first ran
    assert gauges == [2, 2]
    assert sample_value(metrics.exposition().decode(), "shadowtutor_server_engine_batches_running") == 0
    _assert_as_alone(got, want, alone, batched)


def test_one_engine_trains_one_batch_at_a_time(monkeypatch: pytest.MonkeyPatch) -> None:
    seen, _ = _concurrent_calls(monkeypatch, meet=1)
    asyncio.run(_train_all(BatchedDistillation(ServerMetrics(), max_batch=2), _distillers(4),
                           [_key_frame(s) for s in range(4)]))
    assert [len(s) for s in seen] == [2, 2]


def test_a_session_waits_for_its_running_batch_whatever_engine_is_free(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two key frames of one session and one of another, two engines: the session's second key frame is not trained
    beside its first (the stand-in fails a call whose session is in a running batch) but after it."""
    first, other = _distillers(2)
    twin = _distillers(1)[0]
    frames = [_key_frame(0), _key_frame(1), _key_frame(2)]
    want = twin.train(*frames[2])
    seen, _ = _concurrent_calls(monkeypatch, meet=1)
    got = asyncio.run(_train_all(BatchedDistillation(ServerMetrics(), max_batch=8, engines=2),
                                 [first, first, other], frames))
    assert all(not isinstance(g, BaseException) for g in got), got
    assert [len(s) for s in seen] == [2, 1]
    assert (got[2][0].steps, got[2][0].metric) == (want.steps, pytest.approx(want.metric, abs=1e-12))


def test_stopping_cancels_the_key_frames_of_every_running_batch(monkeypatch: pytest.MonkeyPatch) -> None:
    running = threading.Semaphore(0)
    release = threading.Event()

    def held(jobs: list, convolution: Convolution = "grouped", graphs: bool = False,
             objective: Objective = "eager") -> list:
        running.release()
        release.wait(10)  # the engine thread outlives the stop until released
        return []

    monkeypatch.setattr(distillation, "distill_batch", held)
    metrics = ServerMetrics()

    async def main() -> list[bool]:
        engine = BatchedDistillation(metrics, max_batch=1, engines=2)
        engine.start()
        tasks = [asyncio.create_task(engine.train(d, *_key_frame(s), None)) for s, d in enumerate(_distillers(2))]
        for _ in range(2):
            assert await asyncio.get_running_loop().run_in_executor(None, running.acquire, True, 10)
        await engine.stop()
        await asyncio.wait(tasks, timeout=5)
        return [t.cancelled() for t in tasks]

    try:
        assert asyncio.run(main()) == [True, True]
    finally:
        release.set()
    assert sample_value(metrics.exposition().decode(), "shadowtutor_server_engine_batches_running") == 0


def test_a_batch_ended_without_answers_cancels_its_key_frames_and_frees_its_engine(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """However a batch's task ends (here one that never answers, cancelled by the stop), its callers are not left
    waiting, and the engine and the sessions are free again."""

    async def never_answers(self: BatchedDistillation, batch: list) -> None:
        await asyncio.Event().wait()

    monkeypatch.setattr(BatchedDistillation, "_train", never_answers)

    async def main() -> tuple[bool, bool, bool]:
        engine = BatchedDistillation(ServerMetrics(), max_batch=4)
        engine.start()
        training = asyncio.create_task(engine.train(_distillers(1)[0], *_key_frame(0), None))
        while not engine._batches:
            await asyncio.sleep(0.01)
        freed = engine._free_engines
        await engine.stop()
        await asyncio.wait({training}, timeout=5)
        return training.cancelled(), not engine._training, freed is not None and not freed.locked()

    assert asyncio.run(main()) == (True, True, True)


def test_an_engine_count_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="engines"):
        BatchedDistillation(ServerMetrics(), max_batch=4, engines=0)


def test_the_pooled_engine_runs_each_sessions_distiller() -> None:
    distiller, twin = _distillers(2)
    frame, label = _key_frame(3)
    want = twin.train(frame, label)

    async def run() -> tuple:
        with ThreadPoolExecutor(1) as pool:
            return await PooledDistillation(pool).train(distiller, frame, label, None)

    result, seconds = asyncio.run(run())
    assert (result.steps, result.metric) == (want.steps, want.metric) and seconds > 0


def test_auto_picks_batched_on_an_accelerator_and_sequential_on_a_cpu() -> None:
    assert resolve_engine("auto", "cpu") == "sequential"
    assert resolve_engine("auto", "cuda") == "batched"
    assert resolve_engine("batched", "cpu") == "batched"
    assert resolve_engine("sequential", "cuda") == "sequential"


def test_the_automatic_tail_is_fused_on_a_cpu_and_under_the_batched_engine() -> None:
    assert resolve_tail("auto", "cpu", "auto") and resolve_tail("auto", "cpu", "sequential")
    assert resolve_tail("auto", "cuda", "auto") and resolve_tail("auto", "cuda", "batched")
    assert not resolve_tail("auto", "cuda", "sequential")
    assert resolve_tail("fused", "cuda", "sequential") and not resolve_tail("written", "cpu", "auto")
    with ThreadPoolExecutor(1) as pool:
        assert isinstance(make_distillation("auto", "cuda", ServerMetrics(), pool, 4), BatchedDistillation)
        assert isinstance(make_distillation("auto", "cpu", ServerMetrics(), pool, 4), PooledDistillation)


def test_an_engine_not_started_refuses_work() -> None:
    distiller = _distillers(1)[0]
    frame, label = _key_frame(0)
    with pytest.raises(RuntimeError, match="not started"):
        asyncio.run(BatchedDistillation(ServerMetrics(), 4).train(distiller, frame, label, None))


def _server_distiller(settings: ServerSettings) -> Distiller:
    """A session's distiller as the server's models at work make it under ``settings``."""
    from services.server.teaching.loading import load_models
    from services.server.teaching.models import TeachingModels

    async def made() -> Distiller:
        at_work = TeachingModels(load_models(settings), settings, ServerMetrics(), pool)
        try:
            return at_work.new_distiller()
        finally:
            await at_work.stop()

    with ThreadPoolExecutor(1) as pool:
        return asyncio.run(made())


@pytest.mark.parametrize(("tail", "fused"), [("auto", True), ("fused", True), ("written", False)])
def test_the_server_trains_the_tail_its_settings_name(settings: ServerSettings, tail: str, fused: bool) -> None:
    """On this CPU ``auto`` is the fused tail."""
    configured = settings.model_copy(update={"distill_tail": tail})
    assert _server_distiller(configured).fuse_tail is fused


@pytest.mark.parametrize(("precision", "trained"), [("auto", "fp32"), ("bf16", "bf16"), ("tf32", "tf32")])
def test_the_server_trains_at_the_precision_its_settings_name(
    settings: ServerSettings, precision: str, trained: str
) -> None:
    """On this CPU ``auto`` is fp32 (bfloat16 is emulated here, several times slower)."""
    configured = settings.model_copy(update={"distill_precision": precision})
    assert _server_distiller(configured).precision == trained


def test_a_batch_out_of_device_memory_trains_in_halves_and_later_batches_hold_to_the_half(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    metrics = ServerMetrics()
    alone, batched = _distillers(8), _distillers(8)
    frames = [_key_frame(s) for s in range(8)]
    want = [d.train(f, lab) for d, (f, lab) in zip(alone, frames, strict=True)]
    calls = _engine_calls(monkeypatch, fits=4)
    engine = BatchedDistillation(metrics, max_batch=64)
    assert sample_value(metrics.exposition().decode(), "shadowtutor_server_engine_batch_limit") == 64
    got = asyncio.run(_train_all(engine, batched, frames))
    assert [size for size, _ in calls] == [8, 4, 4] and engine.max_batch == 4
    _assert_as_alone(got, want, alone, batched)
    assert sample_value(metrics.exposition().decode(), "shadowtutor_server_engine_batch_limit") == 4


def test_a_single_key_frame_out_of_device_memory_fails_its_session_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    _engine_calls(monkeypatch, fits=0)
    engine = BatchedDistillation(ServerMetrics(), max_batch=2)
    got = asyncio.run(_train_all(engine, _distillers(2), [_key_frame(s) for s in range(2)]))
    assert all(isinstance(g, torch.OutOfMemoryError) for g in got) and engine.max_batch == 1


def test_key_frames_are_prepared_in_the_pool_and_uploaded_by_the_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    """Preparing a key frame on the host (resize, loss weights: work that grows with the frame) runs in the pool,
    in parallel with the batch being trained; the engine thread only uploads it (from pinned memory on CUDA)."""
    threads: dict[str, list[str]] = {"prepare_on_host": [], "upload": []}
    for name in threads:
        original = getattr(Distiller, name)

        def recording(self: Distiller, *args: object, _name: str = name, _original: object = original) -> object:
            threads[_name].append(threading.current_thread().name)
            return _original(self, *args)  # type: ignore[operator]

        monkeypatch.setattr(Distiller, name, recording)
    calls = _engine_calls(monkeypatch)
    frames = [_key_frame(s) for s in range(4)]
    with ThreadPoolExecutor(2, thread_name_prefix="prepare") as pool:
        engine = make_distillation("batched", "cpu", ServerMetrics(), pool, 64)
        assert isinstance(engine, BatchedDistillation)
        got = asyncio.run(_train_all(engine, _distillers(4), frames))
    assert calls == [(4, "grouped")] and all(not isinstance(g, BaseException) for g in got)
    assert len(threads["prepare_on_host"]) == 4 and all(n.startswith("prepare") for n in threads["prepare_on_host"])
    assert len(threads["upload"]) == 4 and all(n.startswith("shadowtutor-engine") for n in threads["upload"])


def test_a_key_frame_whose_session_went_away_during_preparation_is_not_trained(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    original = Distiller.prepare_on_host
    started = threading.Event()

    def slow(self: Distiller, *args: object) -> object:
        started.set()
        time.sleep(0.3)
        return original(self, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(Distiller, "prepare_on_host", slow)
    calls = _engine_calls(monkeypatch)
    distiller = _distillers(1)[0]
    frame, label = _key_frame(0)

    async def main() -> bool:
        engine = BatchedDistillation(ServerMetrics(), max_batch=4)
        engine.start()
        try:
            training = asyncio.create_task(engine.train(distiller, frame, label, None))
            await asyncio.get_running_loop().run_in_executor(None, started.wait, 5)
            training.cancel()  # the edge's session ended
            await asyncio.sleep(0.5)  # the preparation ends meanwhile
            return training.cancelled() and engine._queue.empty()
        finally:
            await engine.stop()

    assert asyncio.run(main())
    assert calls == [] and not distiller.optimizer.state
