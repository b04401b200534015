"""Replaying a step as a CUDA graph: the same end state as calling it, and an eager fallback where capture fails.
The replays need a GPU (skipped without one); the refusal of another device runs everywhere."""

from __future__ import annotations

import pytest
import torch

from shadowtutor.algorithms.step_graph import redirect_stale_streams, replay_step

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


def test_stale_streams_are_redirected_where_torch_can(monkeypatch: pytest.MonkeyPatch) -> None:
    switched: list[bool] = []
    monkeypatch.setattr(torch.autograd.graph, "set_override_stale_capture_stream", switched.append, raising=False)
    assert redirect_stale_streams() is True and switched == [True]
    monkeypatch.delattr(torch.autograd.graph, "set_override_stale_capture_stream")
    assert redirect_stale_streams() is False


@CUDA
def test_a_step_through_an_autograd_node_made_before_the_capture_is_replayed_where_torch_redirects() -> None:
    """The weight's gradient node is made by an eager backward on the default stream, before the capture."""
    device = torch.device("cuda")
    weight = torch.ones(8, device=device, requires_grad=True)
    (weight * 2).sum().backward()
    total = torch.zeros(8, device=device)

    def step() -> None:
        (grad,) = torch.autograd.grad((weight * 3).sum(), [weight])
        total.add_(grad)

    replayed = replay_step(step, 4, device)
    assert total.tolist() == [12.0] * 8
    if hasattr(torch.autograd.graph, "set_override_stale_capture_stream"):
        assert replayed
