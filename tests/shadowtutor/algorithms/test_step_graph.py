"""Replaying a step as a CUDA graph: the same end state as calling it, and an eager fallback where capture fails.
The replays need a GPU (skipped without one); the refusal of another device runs everywhere."""

from __future__ import annotations

import pytest
import torch

from shadowtutor.algorithms.step_graph import replay_step

CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a CUDA device")


def test_a_device_other_than_cuda_is_refused() -> None:
    with pytest.raises(ValueError, match="needs a CUDA device, not cpu"):
        replay_step(lambda: None, 3, torch.device("cpu"))


@CUDA
@pytest.mark.parametrize(("times", "replayed"), [(0, False), (1, False), (2, True), (7, True)])
def test_a_replayed_step_leaves_what_calling_it_leaves(times: int, replayed: bool) -> None:
    device = torch.device("cuda")
    total = torch.zeros((), device=device)
    growth = torch.ones(4, device=device)

    def step() -> None:
        growth.mul_(2)
        total.add_(growth.sum())

    assert replay_step(step, times, device) is replayed
    assert growth.tolist() == [2.0 ** times] * 4
    assert total.item() == sum(4 * 2.0 ** k for k in range(1, times + 1))


@CUDA
def test_a_step_that_cannot_be_captured_runs_eagerly_and_leaves_no_memory_behind() -> None:
    device = torch.device("cuda")
    total = torch.zeros((), device=device)
    before = torch.cuda.memory_allocated(device)

    def step_reading_back() -> None:
        scratch = torch.ones(16 * 1024 * 1024, device=device)  # 64 MiB, from the capture's pool while capturing
        total.add_(scratch[0])
        if total.item() < 0:  # a read back to the host: not allowed while capturing
            raise AssertionError("unreachable")

    assert replay_step(step_reading_back, 5, device) is False
    assert total.item() == 5
    assert torch.cuda.memory_allocated(device) == before
