"""The server's GPU gauges: sampled only for a CUDA device that NVML sees, back to 0 when the server stops.

There is no NVIDIA GPU where these tests run, so NVML is a fake ``pynvml`` (tests.support.fake_nvml) and
torch's CUDA device properties are patched; on the CPU device nothing of either is touched.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import types
from collections.abc import Iterator

import pytest
import torch

from services.server.metrics.gpu import start_gpu_metrics, stop_gpu_metrics
from services.server.metrics.server_metrics import ServerMetrics
from services.server.settings import ServerSettings
from services.server.teaching.loading import BaseStudent, LoadedModels
from services.server.teaching.local import LocalTeaching
from shadowtutor.models.student import StudentNet
from tests.support.fake_nvml import FakeNVML
from tests.support.prometheus import sample_value

CLASSES = ("person", "background")


@pytest.fixture
def fake_nvml(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeNVML]:
    """NVML with two GPUs; torch's cuda:0 is NVML's GPU 1 (as under CUDA_VISIBLE_DEVICES=1), which reports
    20 %, 40 %, then 90 % busy."""
    nvml = FakeNVML([20, 40, 90, 90])
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: types.SimpleNamespace(uuid="0000-1111"))
    yield nvml


def gauges(metrics: ServerMetrics) -> tuple[float, float]:
    text = metrics.exposition().decode()
    return (sample_value(text, "shadowtutor_server_gpu_busy_ratio"),
            sample_value(text, "shadowtutor_server_gpu_memory_used_bytes"))


def test_a_cuda_device_feeds_the_gauges_until_stopped(fake_nvml: FakeNVML) -> None:
    seen = []
    metrics = ServerMetrics()
    metrics.gpu_busy.set = seen.append  # every value the gauge is given
    sampler = start_gpu_metrics(torch.device("cuda", 0), metrics, interval_s=0.01, window_s=0.03)
    assert sampler is not None and sampler.device_index == 1
    assert fake_nvml.all_read.wait(5)
    sampler.stop()  # the gauges hold the last sample's figures
    assert seen[:4] == pytest.approx([0.2, 0.3, 0.5, (0.4 + 0.9 + 0.9) / 3])  # the mean of the last 3 samples
    last = sampler.samples[-1]
    assert gauges(metrics)[1] == last.memory_used_bytes >= 4 * 2**30
    del metrics.gpu_busy.set
    stop_gpu_metrics(sampler, metrics)
    assert gauges(metrics) == (0, 0) and fake_nvml.open == 0


def test_the_cpu_device_samples_nothing(fake_nvml: FakeNVML) -> None:
    metrics = ServerMetrics()
    assert start_gpu_metrics(torch.device("cpu"), metrics) is None
    assert fake_nvml.reads == 0 and gauges(metrics) == (0, 0)
    stop_gpu_metrics(None, metrics)


def test_a_gpu_that_nvml_cannot_read_leaves_the_gauges_at_0(
    fake_nvml: FakeNVML, caplog: pytest.LogCaptureFixture
) -> None:
    fake_nvml.driver = False
    metrics = ServerMetrics()
    with caplog.at_level(logging.WARNING, "services.server.metrics.gpu"):
        assert start_gpu_metrics(torch.device("cuda", 0), metrics) is None
    assert "no GPU metrics: NVML cannot read GPU 0" in caplog.text and gauges(metrics) == (0, 0)


def test_the_teaching_samples_its_gpu_while_it_runs(fake_nvml: FakeNVML) -> None:
    """The teaching starts the sampler once its models are installed on a CUDA device and stops it in stop()."""
    teacher = types.SimpleNamespace(name="stand-in", class_names=CLASSES, device="cuda:0")
    student = BaseStudent(StudentNet(len(CLASSES)).state_dict(), CLASSES, "fresh")
    models = LoadedModels(teacher, student, torch.device("cuda", 0))
    metrics = ServerMetrics()
    teaching = LocalTeaching(ServerSettings(teacher="labels", device="cuda"), metrics, loaded=models)

    async def main() -> None:
        teaching.start()
        assert teaching.models is not None and teaching.models.gpu_sampler is not None
        assert await asyncio.to_thread(fake_nvml.all_read.wait, 5)
        assert gauges(metrics)[1] > 0
        await teaching.stop()

    asyncio.run(main())
    assert teaching.models is None and gauges(metrics) == (0, 0) and fake_nvml.open == 0
