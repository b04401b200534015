"""The teacher queue's own CUDA stream: none for CPU teachers; on a GPU the teacher's work runs on it.

The teachers here are minimal stand-ins that say their device (a real backend needs model weights);
the GPU test runs only where CUDA is present."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
import torch

from services.server.metrics.server_metrics import ServerMetrics
from services.server.teaching.teacher_queue import TeacherQueue, teacher_stream
from shadowtutor.teachers.base import TeacherBase


class DeviceTeacher(TeacherBase):
    """Labels = the frame's first channel, computed on ``device``; records the stream it ran on."""

    name = "device"
    class_names = tuple(f"class-{i}" for i in range(10))

    def __init__(self, device: str) -> None:
        self.device = device
        self.streams: list[object] = []

    def _label_batch(self, frames: list[np.ndarray], frame_indices: list[int] | None) -> list[np.ndarray]:
        if self.device.startswith("cuda"):
            self.streams.append(torch.cuda.current_stream())
        return [torch.from_numpy(f[:, :, 0]).to(self.device).cpu().numpy() for f in frames]


def test_no_stream_without_a_usable_cuda_device() -> None:
    assert teacher_stream(DeviceTeacher("cpu")) is None
    assert teacher_stream(DeviceTeacher("tensorrt")) is None
    if not torch.cuda.is_available():
        assert teacher_stream(DeviceTeacher("cuda")) is None


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_a_cuda_teacher_works_on_the_queues_own_stream() -> None:
    teacher = DeviceTeacher("cuda")

    async def main() -> list:
        queue = TeacherQueue(teacher, ServerMetrics(), max_batch=4)
        queue.start()
        try:
            frames = [np.full((4, 6, 3), i, dtype=np.uint8) for i in range(3)]
            results = await asyncio.gather(*(queue.label(f, i) for i, f in enumerate(frames)))
            return [queue.stream, results]
        finally:
            await queue.stop()

    stream, results = asyncio.run(main())
    assert stream is not None and stream != torch.cuda.default_stream()
    assert teacher.streams and all(s == stream for s in teacher.streams)
    assert [int(r.labels[0, 0]) for r in results] == [0, 1, 2]
