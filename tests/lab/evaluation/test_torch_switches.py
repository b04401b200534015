"""The autotuner switch is set within its block and restored after it, an exception included; the device wait
reaches CUDA devices only; the device's own time is profiled on CUDA only, each kernel counted once."""

from __future__ import annotations

import pytest
import torch
from torch.autograd import DeviceType
from torch.autograd.profiler_util import FunctionEvent

from shadowtutor_lab.evaluation.torch_switches import cudnn_autotuner, device_time, summarise_device_events, synchronize


@pytest.mark.parametrize("before", [False, True])
def test_the_autotuner_is_set_within_and_restored_after(before: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.backends.cudnn, "benchmark", before)
    with cudnn_autotuner(not before):
        assert torch.backends.cudnn.benchmark is (not before)
    assert torch.backends.cudnn.benchmark is before
    with pytest.raises(RuntimeError, match="inside"), cudnn_autotuner(not before):
        raise RuntimeError("inside")
    assert torch.backends.cudnn.benchmark is before


def test_only_a_cuda_device_is_waited_for(monkeypatch: pytest.MonkeyPatch) -> None:
    waited: list[str] = []  # a stand-in for torch.cuda.synchronize: no GPU here
    monkeypatch.setattr(torch.cuda, "synchronize", waited.append)
    synchronize("cpu")
    synchronize("cuda:1")
    assert waited == ["cuda:1"]


def test_the_device_time_of_a_call_off_cuda_is_none_and_the_call_not_made() -> None:
    calls: list[int] = []
    assert device_time(lambda: calls.append(1), "cpu") is None
    assert calls == []


def test_a_kernel_counts_once_not_again_in_the_operator_that_launched_it() -> None:
    """The profile of an operator that launched two kernels, built from torch's own event class as its profiler
    builds it on CUDA (the operator lists its kernels; each kernel is a device event too): no GPU here."""
    operator = FunctionEvent(id=1, name="aten::mm", thread=1, start_us=0, end_us=50, use_device="cuda")
    child = FunctionEvent(id=2, name="aten::addmm", thread=1, start_us=10, end_us=40, use_device="cuda")
    operator.append_cpu_child(child)
    operator.append_kernel("gemm", 0, 300)
    child.append_kernel("gemm_tail", 0, 200)
    kernels = [_on_device("gemm", 3, 300), _on_device("gemm_tail", 4, 200), _on_device("gemm", 5, 200)]
    assert operator.device_time_total == 500  # what summing every event would count again
    summary = summarise_device_events([operator, child, *kernels], largest=1)
    assert summary is not None and summary.seconds == pytest.approx(700e-6)
    assert summary.occupied == pytest.approx(300e-6)  # all three start together
    assert summary.largest == [("gemm", pytest.approx(500e-6))]
    assert summarise_device_events([operator, child]) is None


def test_the_occupied_time_counts_overlapping_work_once_and_gaps_not_at_all() -> None:
    """Kernels and copies that overlap (streams, a copy beside a kernel) occupy the device once; a gap between
    them, the device waiting for the host, occupies nothing."""
    events = [_on_device("copy", 1, 100, start=0), _on_device("gemm", 2, 300, start=50),
              _on_device("fill", 3, 50, start=100), _on_device("gemm", 4, 100, start=1000),
              _on_device("gemm", 5, 100, start=1100)]
    summary = summarise_device_events(events)
    assert summary is not None
    assert summary.seconds == pytest.approx(650e-6)
    assert summary.occupied == pytest.approx(550e-6)  # 0-350, then 1000-1200


def _on_device(name: str, id_: int, microseconds: int, start: int = 1000) -> FunctionEvent:
    """A kernel as the profiler records it on the device."""
    return FunctionEvent(id=id_, name=name, thread=7, start_us=start, end_us=start + microseconds, use_device="cuda",
                         device_type=DeviceType.CUDA)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_the_device_time_of_a_call_on_cuda_is_its_kernels_time() -> None:
    x = torch.randn(2048, 2048, device="cuda")
    x @ x  # cuBLAS set up before the timed kernels
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(20):
        x @ x
    end.record()
    torch.cuda.synchronize()
    measured = device_time(lambda: [x @ x for _ in range(20)], "cuda")
    assert measured is not None and measured.seconds == pytest.approx(start.elapsed_time(end) / 1000, rel=0.2)
    assert measured.occupied == pytest.approx(measured.seconds, rel=0.05)  # one stream: nothing overlaps
    assert measured.largest and measured.largest[0][1] == pytest.approx(measured.seconds, rel=0.05)  # one GEMM
