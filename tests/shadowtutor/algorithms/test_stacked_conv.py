"""One convolution per session: each frame with its own weights, grouped or as im2col and a batched product."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from shadowtutor.algorithms.engine_options import CONVOLUTIONS, Convolution
from shadowtutor.algorithms.stacked_conv import stacked_conv2d

# the student's convolutions: 3x3 with and without stride, 1x3, 3x1, strided 1x1 shortcut, 1x1
CASES = [
    ((3, 3), 1, 1), ((3, 3), 2, 1), ((1, 3), 1, (0, 1)), ((3, 1), 1, (1, 0)), ((1, 1), 2, 0), ((1, 1), 1, 0),
]


@pytest.mark.parametrize("convolution", CONVOLUTIONS)
@pytest.mark.parametrize(("kernel", "stride", "padding"), CASES)
def test_each_session_is_its_own_conv2d_with_its_gradients(
    convolution: Convolution, kernel: tuple[int, int], stride: int, padding: int
) -> None:
    torch.manual_seed(0)
    sessions = 3
    x = torch.randn(sessions, 5, 9, 14, dtype=torch.float64, requires_grad=True)
    weight = torch.randn(sessions, 4, 5, *kernel, dtype=torch.float64, requires_grad=True)
    bias = torch.randn(sessions, 4, dtype=torch.float64, requires_grad=True)
    want = torch.cat([F.conv2d(x[s:s + 1], weight[s], bias[s], stride=stride, padding=padding)
                      for s in range(sessions)])
    got = stacked_conv2d(x, weight, bias, stride, padding, convolution)
    torch.testing.assert_close(got, want, rtol=0, atol=1e-12)
    grad_out = torch.randn_like(want)
    want_grads = torch.autograd.grad(want, [x, weight, bias], grad_out)
    got_grads = torch.autograd.grad(got, [x, weight, bias], grad_out)
    for w, g in zip(want_grads, got_grads, strict=True):
        torch.testing.assert_close(g, w, rtol=0, atol=1e-11)


def test_an_unknown_convolution_is_refused() -> None:
    x, weight, bias = torch.zeros(2, 3, 4, 4), torch.zeros(2, 1, 3, 1, 1), torch.zeros(2, 1)
    with pytest.raises(ValueError, match="unknown convolution 'fft'"):
        stacked_conv2d(x, weight, bias, convolution="fft")  # type: ignore[arg-type]
