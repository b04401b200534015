"""Capturing a call as a CUDA graph: one eager run, then replays with the same effects, and nothing left behind
where the capture fails. The captures need a GPU (skipped without one); the refusal of another device and the
stale-stream switch run everywhere."""

from __future__ import annotations

import pytest
import torch

from shadowtutor.algorithms.step_graph import capture, redirect_stale_streams

CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a CUDA device")


def test_a_device_other_than_cuda_is_refused() -> None:
    with pytest.raises(ValueError, match="needs a CUDA device, not cpu"):
        capture(lambda: None, torch.device("cpu"))


@CUDA
@pytest.mark.parametrize("replays", [0, 1, 6])
def test_a_captured_call_runs_once_and_each_replay_runs_it_again(replays: int) -> None:
    device = torch.device("cuda")
    total = torch.zeros((), device=device)
    growth = torch.ones(4, device=device)

    def call() -> None:
        growth.mul_(2)
        total.add_(growth.sum())

    graph = capture(call, device)
    assert graph is not None
    for _ in range(replays):
        graph.replay()
    times = 1 + replays
    assert growth.tolist() == [2.0 ** times] * 4
    assert total.item() == sum(4 * 2.0 ** k for k in range(1, times + 1))


@CUDA
def test_a_call_that_cannot_be_captured_runs_once_and_leaves_no_memory_behind() -> None:
    device = torch.device("cuda")
    total = torch.zeros((), device=device)
    before = torch.cuda.memory_allocated(device)

    def call_reading_back() -> None:
        scratch = torch.ones(16 * 1024 * 1024, device=device)  # 64 MiB, from the capture's pool while capturing
        total.add_(scratch[0])
        if total.item() < 0:  # a read back to the host: not allowed while capturing
            raise AssertionError("unreachable")

    assert capture(call_reading_back, device) is None
    assert total.item() == 1
    assert torch.cuda.memory_allocated(device) == before


def test_stale_streams_are_redirected_where_torch_can(monkeypatch: pytest.MonkeyPatch) -> None:
    switched: list[bool] = []
    monkeypatch.setattr(torch.autograd.graph, "set_override_stale_capture_stream", switched.append, raising=False)
    assert redirect_stale_streams() is True and switched == [True]
    monkeypatch.delattr(torch.autograd.graph, "set_override_stale_capture_stream")
    assert redirect_stale_streams() is False


@CUDA
def test_a_call_through_an_autograd_node_made_before_the_capture_is_captured_where_torch_redirects() -> None:
    """The weight's gradient node is made by an eager backward on the default stream, before the capture."""
    device = torch.device("cuda")
    weight = torch.ones(8, device=device, requires_grad=True)
    (weight * 2).sum().backward()
    total = torch.zeros(8, device=device)

    def call() -> None:
        (grad,) = torch.autograd.grad((weight * 3).sum(), [weight])
        total.add_(grad)

    graph = capture(call, device)
    if graph is not None:
        for _ in range(3):
            graph.replay()
        assert total.tolist() == [12.0] * 8
    else:
        assert total.tolist() == [3.0] * 8
        assert not hasattr(torch.autograd.graph, "set_override_stale_capture_stream")
