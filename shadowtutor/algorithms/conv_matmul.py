"""Convolutions computed as im2col and a matrix product, for per-session weights under ``vmap``.

Under ``torch.func.vmap`` a convolution whose weights carry the batch axis (each session's own
weights) becomes one grouped convolution with a group per session. :func:`conv2d_as_matmul`
computes the same convolution as ``unfold`` (im2col) and a matrix product, which ``vmap`` turns
into one batched matrix product instead; :class:`ConvolutionsAsMatmul` routes every
``F.conv2d`` call made inside it (``nn.Conv2d`` included) through it. Which form is faster depends
on the device and the sizes (docs/design/batched_distillation.md); both compute the same function,
rounded differently, and autograd differentiates either.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode


def _pair(value: int | Sequence[int]) -> tuple[int, int]:
    if isinstance(value, int):
        return value, value
    first, second = value
    return int(first), int(second)


def conv2d_as_matmul(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
    stride: int | Sequence[int] = 1, padding: int | Sequence[int] = 0,
) -> torch.Tensor:
    """``F.conv2d(x, weight, bias, stride, padding)`` (zero padding, no dilation, one group) for ``x (N, C, H, W)``
    and ``weight (O, C, kh, kw)``: ``(N, O, H', W')``, equal within float rounding."""
    batch, channels, height, width = x.shape
    out_channels, _, kernel_h, kernel_w = weight.shape
    stride_h, stride_w = _pair(stride)
    pad_h, pad_w = _pair(padding)
    out_h = (height + 2 * pad_h - kernel_h) // stride_h + 1
    out_w = (width + 2 * pad_w - kernel_w) // stride_w + 1
    if kernel_h == kernel_w == 1 and pad_h == pad_w == 0:
        columns = x[:, :, ::stride_h, ::stride_w].reshape(batch, channels, out_h * out_w)
    else:
        columns = F.unfold(x, (kernel_h, kernel_w), padding=(pad_h, pad_w), stride=(stride_h, stride_w))
    out = torch.matmul(weight.reshape(out_channels, -1), columns)
    if bias is not None:
        out = out + bias.view(-1, 1)
    return out.view(batch, out_channels, out_h, out_w)


def _as_matmul_call(args: Sequence[Any], kwargs: Mapping[str, Any]) -> tuple[Any, ...] | None:
    """``(x, weight, bias, stride, padding)`` of an ``F.conv2d`` call that :func:`conv2d_as_matmul` computes
    (4-d input, zero padding given as numbers, no dilation, one group); None for any other call."""
    names = ("input", "weight", "bias", "stride", "padding", "dilation", "groups")
    bound = dict(zip(names, args, strict=False)) | dict(kwargs)
    x, padding = bound.get("input"), bound.get("padding", 0)
    if not isinstance(x, torch.Tensor) or x.dim() != 4 or isinstance(padding, str):
        return None
    if _pair(bound.get("dilation", 1)) != (1, 1) or bound.get("groups", 1) != 1:
        return None
    return x, bound["weight"], bound.get("bias"), bound.get("stride", 1), padding


class ConvolutionsAsMatmul(TorchFunctionMode):
    """Within this context (in the thread that entered it), every ``F.conv2d`` that :func:`conv2d_as_matmul`
    covers runs as :func:`conv2d_as_matmul`; any other call, and every other function, runs as it is."""

    def __torch_function__(
        self, func: Callable[..., Any], types: Sequence[type], args: Sequence[Any] = (),
        kwargs: Mapping[str, Any] | None = None,
    ) -> Any:
        kwargs = kwargs or {}
        if func is F.conv2d:
            call = _as_matmul_call(args, kwargs)
            if call is not None:
                return conv2d_as_matmul(*call)
        return func(*args, **kwargs)
