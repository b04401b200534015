"""The shared teacher queue: batching what queued up, isolating failures, metrics.

The teachers here stand in for real backends (a real one needs model weights), on the backends' own
base classes: each labels a frame with the frame's own first channel so that every answer can be
matched to its request.
"""

from __future__ import annotations

import asyncio
import logging
import threading

import numpy as np
import pytest

from services.server.metrics.server_metrics import ServerMetrics
from services.server.teaching.teacher_queue import TeacherFailed, TeacherQueue
from shadowtutor.teachers.base import InstanceTeacherBase, TeacherAnswer, TeacherBase, TeacherError
from tests.support.prometheus import sample_value


def frame(value: int) -> np.ndarray:
    return np.full((4, 6, 3), value, dtype=np.uint8)


class RecordingTeacher(TeacherBase):
    """Labels = the frame's first channel; every call waits until ``release`` is set."""

    name = "recording"
    class_names = tuple(f"class-{i}" for i in range(10))
    device = "cpu"

    def __init__(self, fail_index: int | None = None) -> None:
        self.batches: list[list[int]] = []
        self.entered = threading.Event()
        self.release = threading.Event()
        self.fail_index = fail_index

    def _label_batch(self, frames: list[np.ndarray], frame_indices: list[int] | None) -> list[np.ndarray]:
        assert frame_indices is not None
        self.batches.append(list(frame_indices))
        self.entered.set()
        assert self.release.wait(10)
        if self.fail_index in frame_indices:
            raise RuntimeError(f"CUDA out of memory on frame {self.fail_index}")
        return [f[:, :, 0].copy() for f in frames]


async def label_all(queue: TeacherQueue, teacher: RecordingTeacher, indices: list[int]) -> list:
    """Submit the first index, wait until the teacher is busy with it, then submit the rest."""
    first = asyncio.ensure_future(queue.label(frame(indices[0]), indices[0]))
    assert await asyncio.to_thread(teacher.entered.wait, 10)
    rest = [asyncio.ensure_future(queue.label(frame(i), i)) for i in indices[1:]]
    await asyncio.sleep(0.01)
    assert sample_value(queue.metrics.exposition().decode(), "shadowtutor_server_teacher_queue_depth") == len(rest)
    teacher.release.set()
    return await asyncio.gather(first, *rest, return_exceptions=True)


def run_queue(teacher: RecordingTeacher, indices: list[int], max_batch: int) -> tuple[list, ServerMetrics]:
    async def main() -> list:
        queue = TeacherQueue(teacher, metrics, max_batch=max_batch)
        queue.start()
        try:
            return await label_all(queue, teacher, indices)
        finally:
            await queue.stop()

    metrics = ServerMetrics()
    return asyncio.run(main()), metrics


def test_requests_that_queue_up_are_labelled_in_one_batch() -> None:
    teacher = RecordingTeacher()
    results, metrics = run_queue(teacher, [1, 2, 3, 4, 5], max_batch=8)
    assert teacher.batches == [[1], [2, 3, 4, 5]]
    for index, result in zip([1, 2, 3, 4, 5], results, strict=True):
        assert (result.labels == index).all() and result.seconds > 0
    text = metrics.exposition().decode()
    assert sample_value(text, "shadowtutor_server_teacher_latency_seconds_count") == 5
    assert sample_value(text, "shadowtutor_server_teacher_queue_depth") == 0
    assert sample_value(text, "shadowtutor_server_teacher_batch_size_count") == 2  # calls: 1 frame, then 4
    assert sample_value(text, "shadowtutor_server_teacher_batch_size_bucket", le="2.0") == 1
    assert sample_value(text, "shadowtutor_server_teacher_batch_size_sum") == 5


def test_batches_respect_the_limit() -> None:
    teacher = RecordingTeacher()
    _, metrics = run_queue(teacher, [1, 2, 3, 4, 5], max_batch=2)
    assert teacher.batches == [[1], [2, 3], [4, 5]]
    text = metrics.exposition().decode()
    assert sample_value(text, "shadowtutor_server_teacher_batch_size_bucket", le="1.0") == 1
    assert sample_value(text, "shadowtutor_server_teacher_batch_size_bucket", le="2.0") == 3


def test_a_failing_frame_fails_alone() -> None:
    teacher = RecordingTeacher(fail_index=3)
    results, metrics = run_queue(teacher, [1, 2, 3, 4], max_batch=8)
    assert teacher.batches == [[1], [2, 3, 4], [2], [3], [4]]  # the failed batch retried frame by frame
    assert isinstance(results[2], TeacherFailed) and "out of memory on frame 3" in str(results[2])
    for index in (0, 1, 3):
        assert (results[index].labels == index + 1).all()
    assert sample_value(metrics.exposition().decode(), "shadowtutor_server_teacher_latency_seconds_count") == 3


class WrongTeacher(TeacherBase):
    """A backend that answers frame 7 with the wrong size and frame 8 with a class it does not have."""

    name = "wrong"
    class_names = ("thing", "background")
    device = "cpu"

    def _label_batch(self, frames: list[np.ndarray], frame_indices: list[int] | None) -> list[np.ndarray]:
        assert frame_indices is not None
        return [
            np.full((frame.shape[0] + (index == 7), frame.shape[1]), 5 if index == 8 else 1, dtype=np.uint8)
            for frame, index in zip(frames, frame_indices, strict=True)
        ]


def test_bad_answers_fail_only_their_frames() -> None:
    async def main() -> list:
        queue = TeacherQueue(WrongTeacher(), ServerMetrics(), max_batch=4)
        queue.start()
        try:
            return await asyncio.gather(*(queue.label(frame(i), i) for i in (5, 7, 8, 9)), return_exceptions=True)
        finally:
            await queue.stop()

    ok, wrong_size, wrong_class, ok_too = asyncio.run(main())
    assert ok.labels.shape == (4, 6) and ok_too.labels.shape == (4, 6)
    assert isinstance(wrong_size, TeacherFailed) and "shape (5, 6)" in str(wrong_size)
    assert isinstance(wrong_class, TeacherFailed) and "outside 0..1" in str(wrong_class)


def test_label_before_start_is_an_error() -> None:
    async def main() -> None:
        await TeacherQueue(WrongTeacher(), ServerMetrics()).label(frame(1), 1)

    with pytest.raises(RuntimeError, match="not started"):
        asyncio.run(main())


class RefusingTeacher(TeacherBase):
    """Refuses every frame index but 0, as the labels teacher refuses an index it has no label for."""

    name = "refusing"
    class_names = ("thing", "background")
    device = "cpu"

    def _label_batch(self, frames: list[np.ndarray], frame_indices: list[int] | None) -> list[np.ndarray]:
        assert frame_indices is not None
        for index in frame_indices:
            if index != 0:
                raise TeacherError(f"no stored label for frame {index}")
        return [np.ones(frame.shape[:2], dtype=np.uint8) for frame in frames]


def test_a_refused_input_fails_its_frame_without_a_traceback_in_the_log(caplog: pytest.LogCaptureFixture) -> None:
    # found by `shadowtutor fuzz`: an edge's absurd frame_index logged a full traceback per key frame
    async def main() -> list:
        queue = TeacherQueue(RefusingTeacher(), ServerMetrics(), max_batch=1)
        queue.start()
        try:
            return await asyncio.gather(*(queue.label(frame(1), i) for i in (0, 10**300)), return_exceptions=True)
        finally:
            await queue.stop()

    with caplog.at_level(logging.WARNING, logger="services.server.teaching.teacher_queue"):
        ok, refused = asyncio.run(main())
    assert ok.labels.shape == (4, 6)
    assert isinstance(refused, TeacherFailed) and "no stored label" in str(refused)
    (record,) = [r for r in caplog.records if "teacher failed" in r.getMessage()]
    assert not record.exc_info


class InstanceTeacher(InstanceTeacherBase):
    """Gives instance boxes with its labels (as Mask R-CNN does); frame 3's boxes are malformed."""

    name = "instances"
    class_names = ("thing", "background")
    device = "cpu"

    def _teach_batch(self, frames: list[np.ndarray], frame_indices: list[int] | None) -> list[TeacherAnswer]:
        assert frame_indices is not None
        return [
            TeacherAnswer(np.ones(f.shape[:2], np.uint8), np.zeros((2, 3)) if i == 3 else np.array([[0, 0, i, i]]))
            for f, i in zip(frames, frame_indices, strict=True)
        ]


def test_instance_boxes_pass_through_and_malformed_ones_fail_their_frame() -> None:
    async def main() -> list:
        queue = TeacherQueue(InstanceTeacher(), ServerMetrics(), max_batch=4)
        queue.start()
        try:
            return await asyncio.gather(*(queue.label(frame(1), i) for i in (2, 3)), return_exceptions=True)
        finally:
            await queue.stop()

    ok, malformed = asyncio.run(main())
    assert ok.boxes.dtype == np.float32 and ok.boxes.tolist() == [[0, 0, 2, 2]]
    assert isinstance(malformed, TeacherFailed) and "instance boxes of shape (2, 3)" in str(malformed)


def test_a_teacher_without_instances_gives_no_boxes() -> None:
    results, _ = run_queue(RecordingTeacher(), [1, 2], max_batch=8)
    assert all(r.boxes is None for r in results)
