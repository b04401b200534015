"""Convolutions as im2col and a matrix product: the same function as ``F.conv2d``, and routed only where asked."""

from __future__ import annotations

import threading

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.func import vmap

from shadowtutor.algorithms import conv_matmul
from shadowtutor.algorithms.conv_matmul import ConvolutionsAsMatmul, conv2d_as_matmul

# the student's convolutions: 3x3 with and without stride, 1x3, 3x1, strided 1x1 shortcut
CASES = [
    ((3, 3), 1, 1), ((3, 3), 2, 1), ((1, 3), 1, (0, 1)), ((3, 1), 1, (1, 0)), ((1, 1), 2, 0), ((1, 1), 1, 0),
]


@pytest.mark.parametrize(("kernel", "stride", "padding"), CASES)
def test_equals_conv2d_with_its_gradients(kernel: tuple[int, int], stride: int, padding: int) -> None:
    torch.manual_seed(0)
    x = torch.randn(2, 5, 9, 14, dtype=torch.float64, requires_grad=True)
    weight = torch.randn(4, 5, *kernel, dtype=torch.float64, requires_grad=True)
    bias = torch.randn(4, dtype=torch.float64, requires_grad=True)
    want = F.conv2d(x, weight, bias, stride=stride, padding=padding)
    got = conv2d_as_matmul(x, weight, bias, stride=stride, padding=padding)
    torch.testing.assert_close(got, want, rtol=0, atol=1e-12)
    grad_out = torch.randn_like(want)
    want_grads = torch.autograd.grad(want, [x, weight, bias], grad_out)
    got_grads = torch.autograd.grad(got, [x, weight, bias], grad_out)
    for w, g in zip(want_grads, got_grads, strict=True):
        torch.testing.assert_close(g, w, rtol=0, atol=1e-12)


def test_per_session_weights_under_vmap_equal_the_grouped_convolution() -> None:
    torch.manual_seed(1)
    sessions = 4
    x = torch.randn(sessions, 1, 6, 10, 12, dtype=torch.float64)
    weight = torch.randn(sessions, 3, 6, 3, 3, dtype=torch.float64, requires_grad=True)
    bias = torch.randn(sessions, 3, dtype=torch.float64, requires_grad=True)

    def one(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return F.conv2d(x, w, b, padding=1)

    want = vmap(one)(x, weight, bias)
    with ConvolutionsAsMatmul():
        got = vmap(one)(x, weight, bias)
    torch.testing.assert_close(got, want, rtol=0, atol=1e-12)
    want_grads = torch.autograd.grad(want.square().sum(), [weight, bias])
    got_grads = torch.autograd.grad(got.square().sum(), [weight, bias])
    for w, g in zip(want_grads, got_grads, strict=True):
        torch.testing.assert_close(g, w, rtol=0, atol=1e-10)


@pytest.fixture
def routed(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, ...]]:
    """The kernel sizes of the convolutions routed through :func:`conv2d_as_matmul`."""
    calls: list[tuple[int, ...]] = []
    original = conv_matmul.conv2d_as_matmul

    def counting(x: torch.Tensor, weight: torch.Tensor, *args: object) -> torch.Tensor:
        calls.append(tuple(weight.shape[2:]))
        return original(x, weight, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(conv_matmul, "conv2d_as_matmul", counting)
    return calls


def test_routes_modules_and_functions_inside_the_context_only(routed: list[tuple[int, ...]]) -> None:
    x = torch.randn(1, 4, 8, 8)
    conv = nn.Conv2d(4, 4, kernel_size=3, padding=1)
    conv(x)
    assert routed == []
    with ConvolutionsAsMatmul():
        conv(x)
        F.conv2d(x, torch.randn(2, 4, 1, 3), padding=(0, 1))
    assert routed == [(3, 3), (1, 3)]
    conv(x)
    assert len(routed) == 2


def test_leaves_the_calls_it_does_not_cover_to_conv2d(routed: list[tuple[int, ...]]) -> None:
    x = torch.randn(1, 4, 8, 8)
    with ConvolutionsAsMatmul():
        grouped = F.conv2d(x, torch.randn(4, 2, 3, 3), groups=2, padding=1)
        dilated = F.conv2d(x, torch.randn(2, 4, 3, 3), dilation=2, padding=2)
        same = F.conv2d(x, torch.randn(2, 4, 3, 3), padding="same")
    assert routed == []
    assert grouped.shape == (1, 4, 8, 8) and dilated.shape == same.shape == (1, 2, 8, 8)


def test_other_threads_are_not_routed(routed: list[tuple[int, ...]]) -> None:
    x = torch.randn(1, 4, 8, 8)
    weight = torch.randn(2, 4, 3, 3)
    entered, done = threading.Event(), threading.Event()

    def other_thread() -> None:
        entered.wait(5)
        F.conv2d(x, weight, padding=1)
        done.set()

    thread = threading.Thread(target=other_thread)
    thread.start()
    with ConvolutionsAsMatmul():
        entered.set()
        assert done.wait(5)
    thread.join()
    assert routed == []
