"""The autotuner switch is set within its block and restored after it, an exception included; the device wait
reaches CUDA devices only; the device's own time is profiled on CUDA only."""

from __future__ import annotations

import pytest
import torch

from shadowtutor_lab.evaluation.torch_switches import cudnn_autotuner, kernel_seconds, synchronize


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
    assert kernel_seconds(lambda: calls.append(1), "cpu") is None
    assert calls == []


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
    measured = kernel_seconds(lambda: [x @ x for _ in range(20)], "cuda")
    assert measured is not None and measured == pytest.approx(start.elapsed_time(end) / 1000, rel=0.5)
