"""One convolution per session, for a batch of sessions that each have their own weights and their
own frame.

:func:`stacked_conv2d` takes frames ``(S, C, H, W)`` and weights ``(S, O, C, kh, kw)`` (one frame
and one weight per session) and gives ``F.conv2d`` of each frame with its own weights, ``(S, O, H',
W')``, computed as the batch's ``convolution`` says:

* ``grouped``: one grouped convolution with a group per session (cuDNN's grouped kernels on a GPU);
* ``matmul``: im2col (``F.unfold``) and one batched matrix product (``torch.baddbmm``).

Both are the same function, rounded differently; autograd differentiates either. Which is faster
depends on the device and the sizes (docs/design/batched_distillation.md).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F

from shadowtutor.algorithms.engine_options import Convolution


def _pair(value: int | Sequence[int]) -> tuple[int, int]:
    if isinstance(value, int):
        return value, value
    first, second = value
    return int(first), int(second)


def stacked_conv2d(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor,
    stride: int | Sequence[int] = 1,
    padding: int | Sequence[int] = 0,
    convolution: Convolution = "grouped",
) -> torch.Tensor:
    """Per session ``s``, ``F.conv2d(x[s:s+1], weight[s], bias[s], stride, padding)`` (zero padding,
    no dilation) for ``x (S, C, H, W)``, ``weight (S, O, C, kh, kw)`` and ``bias (S, O)``: ``(S, O,
    H', W')``. ValueError for an unknown ``convolution``."""
    sessions, channels, height, width = x.shape
    out_channels, kernel_h, kernel_w = weight.shape[1], weight.shape[3], weight.shape[4]
    stride_h, stride_w = _pair(stride)
    pad_h, pad_w = _pair(padding)
    out_h = (height + 2 * pad_h - kernel_h) // stride_h + 1
    out_w = (width + 2 * pad_w - kernel_w) // stride_w + 1
    if convolution == "grouped":
        out = F.conv2d(
            x.reshape(1, sessions * channels, height, width),
            weight.reshape(sessions * out_channels, channels, kernel_h, kernel_w),
            bias.reshape(sessions * out_channels),
            stride=(stride_h, stride_w),
            padding=(pad_h, pad_w),
            groups=sessions,
        )
        return out.view(sessions, out_channels, out_h, out_w)
    if convolution != "matmul":
        raise ValueError(f"unknown convolution {convolution!r}; use 'grouped' or 'matmul'")
    if kernel_h == kernel_w == 1 and pad_h == pad_w == 0:
        columns = x[:, :, ::stride_h, ::stride_w].reshape(sessions, channels, out_h * out_w)
    else:
        columns = F.unfold(
            x, (kernel_h, kernel_w), padding=(pad_h, pad_w), stride=(stride_h, stride_w)
        )
    out = torch.baddbmm(bias.unsqueeze(2), weight.reshape(sessions, out_channels, -1), columns)
    return out.view(sessions, out_channels, out_h, out_w)
