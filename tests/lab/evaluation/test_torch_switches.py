"""The autotuner switch is set within its block and restored after it, an exception included; the device wait
reaches CUDA devices only."""

from __future__ import annotations

import pytest
import torch

from shadowtutor_lab.evaluation.torch_switches import cudnn_autotuner, synchronize


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
