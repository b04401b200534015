"""The student's trainable back for a batch of sessions, each with its own weights and its own
frame.

:class:`StackedBack` computes, for every session ``s`` at once, what :meth:`StudentNet.forward_back`
(or, with the fused tail, :func:`~shadowtutor.models.fast_student.fused_back`) computes for session
``s``'s front features with session ``s``'s trainable weights: written out with a leading session
axis on every tensor, so that each layer is one batched operation and the host's work per step (a
few hundred operations) does not grow with the sessions.

Each block's normalisation is the student's ``BatchNorm2d`` with the statistics of one frame, which
is instance normalisation; each convolution is
:func:`~shadowtutor.algorithms.stacked_conv.stacked_conv2d` (``grouped`` or ``matmul``). The same
function as the student's, rounded differently, differentiable in the stacked weights.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from shadowtutor.algorithms.engine_options import Convolution
from shadowtutor.algorithms.stacked_conv import stacked_conv2d
from shadowtutor.models.fast_student import (
    fold_head_weights,
    fold_tail_weights,
    tail_fusable,
    tail_scores,
)
from shadowtutor.models.student import StudentBlock, StudentNet, upsample


@dataclass(kw_only=True, frozen=True)
class _BlockShape:
    """What a :class:`StudentBlock` is besides its weights: its name, stride and normalisation's
    epsilon, and whether its shortcut is a convolution."""

    name: str
    stride: int
    eps: float
    short_conv: bool

    @classmethod
    def of(cls, name: str, block: StudentBlock) -> _BlockShape:
        return cls(
            name=name,
            stride=block.stride,
            eps=float(block.norm.eps),
            short_conv=block.short_path is not None,
        )


class StackedBack:
    """``back(weights, dec1, enc2, enc1, x1_size, input_size)``: every session's class scores ``(S,
    classes, H, W)`` from its front features ``dec1``, ``enc2``, ``enc1`` (each ``(S, C, h, w)``,
    one frame per session) and its trainable weights ``weights`` (by state-dict key of the student's
    back, each ``(S, *shape)``).

    ``fuse_tail``: the tail fused where it fuses
    (:func:`~shadowtutor.models.fast_student.tail_fusable`), as
    :func:`~shadowtutor.models.fast_student.fused_back`; ``scores_only`` (fused tails that fuse
    only) stops before the last upsampling to the frame, as
    :func:`~shadowtutor.models.fast_student.fused_back_scores`, and raises ValueError where the tail
    does not fuse.
    """

    def __init__(
        self, student: StudentNet, convolution: Convolution, fuse_tail: bool, *, scores_only: bool
    ) -> None:
        self.convolution = convolution
        self.fuse_tail = fuse_tail
        self.scores_only = scores_only
        self.dec2 = _BlockShape.of("dec2", student.dec2)
        self.dec3 = _BlockShape.of("dec3", student.dec3)

    def __call__(
        self,
        weights: Mapping[str, torch.Tensor],
        dec1: torch.Tensor,
        enc2: torch.Tensor,
        enc1: torch.Tensor,
        x1_size: tuple[int, int],
        input_size: tuple[int, int],
    ) -> torch.Tensor:
        dec2 = upsample(
            self._block(weights, self.dec2, torch.cat([dec1, enc2], dim=1)), enc1.shape[2:]
        )
        dec3 = self._block(weights, self.dec3, torch.cat([dec2, enc1], dim=1))
        if self.fuse_tail and tail_fusable(dec3.shape[2:], x1_size):
            head = fold_head_weights(
                weights["out_conv2.weight"],
                weights["out_conv2.bias"],
                weights["out_conv3.weight"],
                weights["out_conv3.bias"],
            )
            folded = fold_tail_weights(
                weights["out_conv1.weight"], weights["out_conv1.bias"], *head
            )
            scores = tail_scores(dec3, folded, self._conv)
            return scores if self.scores_only else upsample(scores, input_size)
        if self.scores_only:
            raise ValueError(f"the tail does not fuse at an input of {tuple(input_size)}")
        hidden = self._conv(
            upsample(dec3, x1_size), weights["out_conv1.weight"], weights["out_conv1.bias"], 1, 1
        )
        hidden = self._conv(hidden, weights["out_conv2.weight"], weights["out_conv2.bias"], 1, 1)
        return self._conv(
            upsample(hidden, input_size), weights["out_conv3.weight"], weights["out_conv3.bias"]
        )

    def _conv(
        self,
        x: torch.Tensor,
        weight: torch.Tensor,
        bias: torch.Tensor,
        stride: int | tuple[int, int] = 1,
        padding: int | tuple[int, int] = 0,
    ) -> torch.Tensor:
        return stacked_conv2d(x, weight, bias, stride, padding, self.convolution)

    def _block(
        self, weights: Mapping[str, torch.Tensor], block: _BlockShape, x: torch.Tensor
    ) -> torch.Tensor:
        """:meth:`StudentBlock.forward` of every session's frame with its own weights."""

        def weight(key: str) -> torch.Tensor:
            return weights[f"{block.name}.{key}"]

        sessions, channels, height, width = x.shape
        normalised = F.instance_norm(
            x.reshape(1, sessions * channels, height, width),
            weight=weight("preact_path.0.weight").reshape(-1),
            bias=weight("preact_path.0.bias").reshape(-1),
            eps=block.eps,
        )
        preact = F.relu(normalised.view(sessions, channels, height, width))
        if block.short_conv:
            short = self._conv(
                preact, weight("short_path.weight"), weight("short_path.bias"), block.stride
            )
        else:
            short = x[:, :, :: block.stride, :: block.stride] if block.stride > 1 else x
        long = F.relu(
            self._conv(
                preact, weight("long_path.0.weight"), weight("long_path.0.bias"), block.stride, 1
            )
        )
        long = self._conv(long, weight("long_path.2.weight"), weight("long_path.2.bias"), 1, (0, 1))
        long = self._conv(long, weight("long_path.3.weight"), weight("long_path.3.bias"), 1, (1, 0))
        return short + long
