"""The GPU utilisation sampler.

The tests run where there is no NVIDIA GPU (CI, the development machines), so the sampling itself runs
against a fake ``pynvml`` module (a mock of NVML: tests.support.fake_nvml) injected into ``sys.modules``;
the real absence (no ``pynvml``, or ``pynvml`` without a driver) is tested as it is on such a machine.
"""

from __future__ import annotations

import sys
import threading
import types
from collections.abc import Iterator

import pytest
import torch

from shadowtutor.gpu_usage import (
    GpuMonitoringUnavailable,
    GpuSample,
    GpuUsageSampler,
    gpu_monitoring_available,
    nvml_index,
)
from tests.support.fake_nvml import FakeNVML


@pytest.fixture
def fake_nvml(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeNVML]:
    nvml = FakeNVML([20, 40, 90])
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    yield nvml


def test_samples_utilisation_and_memory_until_stopped(fake_nvml: FakeNVML) -> None:
    seen: list[GpuSample] = []
    sampler = GpuUsageSampler(device_index=1, interval_s=0.01, on_sample=seen.append)
    assert sampler.busy_fraction() is None and sampler.samples == []
    sampler.start()
    assert fake_nvml.all_read.wait(5)
    sampler.stop()
    samples = sampler.samples
    assert [s.busy for s in samples[:3]] == [0.2, 0.4, 0.9] and all(s.busy == 0.9 for s in samples[3:])
    assert [s.memory_used_bytes for s in samples[:3]] == [2**30, 2 * 2**30, 3 * 2**30]
    assert [s.t for s in samples] == sorted(s.t for s in samples)
    assert sampler.busy_fraction() == pytest.approx(sum(s.busy for s in samples) / len(samples))
    assert seen == samples and fake_nvml.open == 0  # NVML shut down again
    count = len(sampler.samples)
    threading.Event().wait(0.05)
    assert len(sampler.samples) == count  # stopped means stopped


def test_keep_bounds_the_samples_but_not_the_mean(fake_nvml: FakeNVML) -> None:
    sampler = GpuUsageSampler(device_index=1, interval_s=0.01, keep=1)
    sampler.start()
    assert fake_nvml.all_read.wait(5)
    sampler.stop()
    (last,) = sampler.samples
    assert last.busy == 0.9 and sampler.busy_fraction() < 0.9


def test_failed_reads_are_counted_and_sampling_goes_on(fake_nvml: FakeNVML, caplog: pytest.LogCaptureFixture) -> None:
    fake_nvml.fail_reads = 2
    sampler = GpuUsageSampler(device_index=1, interval_s=0.01)
    sampler.start()
    assert fake_nvml.all_read.wait(5)
    sampler.stop()
    assert sampler.failures == 2 and sampler.samples[0].busy == 0.2
    assert [r.message for r in caplog.records].count("cannot read GPU 1's utilisation from NVML: GPU is lost") == 1


def test_a_restart_drops_the_earlier_run(fake_nvml: FakeNVML) -> None:
    sampler = GpuUsageSampler(device_index=1, interval_s=0.01)
    sampler.start()
    with pytest.raises(RuntimeError, match="already running"):
        sampler.start()
    assert fake_nvml.all_read.wait(5)
    sampler.stop()
    sampler.stop()  # twice is fine
    fake_nvml.all_read.clear()
    fake_nvml.busy_percent = [10] * (fake_nvml.reads + 2)
    sampler.start()
    assert fake_nvml.all_read.wait(5)
    sampler.stop()
    assert sampler.busy_fraction() == pytest.approx(0.1) and fake_nvml.open == 0


def test_availability_follows_driver_and_device(fake_nvml: FakeNVML) -> None:
    assert gpu_monitoring_available(0) and gpu_monitoring_available(1)
    assert not gpu_monitoring_available(2)
    with pytest.raises(GpuMonitoringUnavailable, match="no GPU 2: NVML sees 2"):
        GpuUsageSampler(device_index=2).start()
    fake_nvml.driver = False
    assert not gpu_monitoring_available()
    with pytest.raises(GpuMonitoringUnavailable, match="no NVIDIA driver"):
        GpuUsageSampler().start()
    assert fake_nvml.open == 0


def test_without_pynvml_monitoring_is_unavailable_quietly(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml raises ImportError
    assert gpu_monitoring_available() is False
    assert nvml_index(3) == 3
    with pytest.raises(GpuMonitoringUnavailable, match="pip install nvidia-ml-py"):
        GpuUsageSampler().start()


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_on_this_machine_without_a_gpu_monitoring_is_unavailable() -> None:
    """The real pynvml where it is installed (it then finds no driver), else the missing module."""
    assert gpu_monitoring_available() is False
    with pytest.raises(GpuMonitoringUnavailable):
        GpuUsageSampler().start()


def test_nvml_index_matches_torch_devices_by_uuid(fake_nvml: FakeNVML, monkeypatch: pytest.MonkeyPatch) -> None:
    uuids = {0: "0000-1111", 5: "2222-3333"}
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: types.SimpleNamespace(uuid=uuids[i]))
    assert nvml_index(0) == 1  # e.g. CUDA_VISIBLE_DEVICES=1
    assert nvml_index(5) == 5  # unknown to NVML: the index as given
    assert fake_nvml.open == 0


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="interval_s"):
        GpuUsageSampler(interval_s=0)
    with pytest.raises(ValueError, match="keep"):
        GpuUsageSampler(keep=0)
