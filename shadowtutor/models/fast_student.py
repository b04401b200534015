"""A faster inference graph of :class:`~shadowtutor.models.student.StudentNet`, same labels.

Three rewrites, each exact in real arithmetic (only float rounding differs):

* ``BatchNorm2d(track_running_stats=False)`` at batch 1 normalises with the frame's own
  per-channel statistics: that is instance normalisation, computed as such;
* ``out_conv3`` (1x1) runs *before* the final bilinear upsampling instead of after it:
  both are linear and the bilinear weights sum to 1, so they commute, and the 1x1 conv
  then sees a quarter of the pixels (and the upsampling 9 channels instead of 32);
* ``out_conv3`` is folded into ``out_conv2`` (a 1x1 conv after a 3x3 conv with nothing in
  between is one 3x3 conv with ``W3 @ W2`` weights), saving a 32-channel pass;
* the tail is linear from the ``dec3`` block's output on (x4 bilinear upsampling, ``out_conv1``,
  the folded head, with no activation between), so where the upsampling is exactly x4 it runs
  as one 3x3 convolution at ``dec3``'s resolution with one output channel per class and
  sub-pixel phase, then a pixel shuffle (:func:`fold_tail`): the two 32-channel 3x3 convolutions
  at a quarter of the frame's resolution, two thirds of the student's work, are gone. Only the
  outer two rows and columns differ (there the convolutions' zero padding reads beyond the
  frame); they are computed the original way from thin strips.

The input is the raw BGR ``uint8`` frame ``(H, W, 3)``; the graph subtracts the pixel mean
itself, so the same module exports to ONNX with preprocessing and argmax inside.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
import torch.nn.functional as F
from torch import nn

from shadowtutor.models.student import PIXEL_MEAN_BGR, StudentBlock, StudentNet


class WeightUpdateError(ValueError):
    """A weight update names keys the student does not have, or tensors of the wrong shape."""


def check_update(student: StudentNet, update: Mapping[str, torch.Tensor]) -> None:
    """Raise :class:`WeightUpdateError` unless every entry of ``update`` fits ``student``."""
    state = student.state_dict()
    unknown = sorted(set(update) - set(state))
    if unknown:
        raise WeightUpdateError(f"the update names keys the student does not have: {unknown[:5]}")
    for key, value in update.items():
        if tuple(value.shape) != tuple(state[key].shape):
            raise WeightUpdateError(
                f"update {key!r} has shape {tuple(value.shape)}, the student's is {tuple(state[key].shape)}"
            )


def fold_head(student: StudentNet) -> tuple[torch.Tensor, torch.Tensor]:
    """Weight and bias of the single 3x3 conv equal to ``out_conv3(out_conv2(x))``."""
    w2, b2 = student.out_conv2.weight.detach(), student.out_conv2.bias.detach()
    w3 = student.out_conv3.weight.detach()[:, :, 0, 0]
    weight = torch.einsum("om,mikl->oikl", w3, w2).contiguous()
    bias = w3 @ b2 + student.out_conv3.bias.detach()
    return weight, bias


TAIL_UPSCALE = 4  # dec3's output is upsampled x4 to in_conv1's resolution (frame sizes like 640x360)
TAIL_BORDER = 2  # outer rows / columns of the tail output whose receptive field holds zero padding


def fold_tail(
    student: StudentNet, head_weight: torch.Tensor, head_bias: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Weight ``(classes * 16, C, 3, 3)`` and bias of the 3x3 convolution that, followed by
    ``pixel_shuffle(4)``, equals ``head(out_conv1(upsample_x4(x)))`` away from the border
    (``x`` padded by replication, as bilinear upsampling clamps).

    The two 3x3 convolutions compose into one 5x5 kernel; per axis, output phase ``p`` at tap
    ``t`` reads the upsampled position ``4i + p + t``, a fixed mix of ``x[i - 1 .. i + 1]`` taken
    from PyTorch's own interpolation of unit impulses.
    """
    w1, b1 = student.out_conv1.weight.detach(), student.out_conv1.bias.detach()
    composed = w1.new_zeros(head_weight.shape[0], w1.shape[1], 5, 5)  # head after out_conv1, one 5x5 kernel
    for a in range(3):
        for b in range(3):
            composed[:, :, a:a + 3, b:b + 3] += torch.einsum("km,mcuv->kcuv", head_weight[:, :, a, b], w1)
    r = TAIL_UPSCALE
    impulses = F.interpolate(torch.eye(7).unsqueeze(0), scale_factor=r, mode="linear", align_corners=False)[0]
    # mix[p, t, j]: weight of x[i + j - 1] in the upsampled position r * i + p + t - 2 (i = 3)
    mix = torch.stack([impulses[2:5, r * 3 + p - 2: r * 3 + p + 3].t() for p in range(r)])
    weight = torch.einsum("kcuv,yuj,xvl->kyxcjl", composed, mix, mix).reshape(-1, w1.shape[1], 3, 3)
    bias = head_bias + torch.einsum("kmab,m->k", head_weight, b1)
    return weight.contiguous(), bias.repeat_interleave(r * r).contiguous()


def tail_fusable(dec3_size: tuple[int, int] | torch.Size, x1_size: tuple[int, int] | torch.Size) -> bool:
    """Whether :func:`fold_tail` applies: in_conv1's output is exactly 4x dec3's (e.g. 640x360 frames)."""
    return tuple(x1_size) == (TAIL_UPSCALE * dec3_size[0], TAIL_UPSCALE * dec3_size[1])


def frame_tail_fusable(height: int, width: int) -> bool:
    """:func:`tail_fusable` for a frame of ``height x width`` (in_conv1, in_conv2, enc1: stride 2, padding 1)."""
    x1 = ((height + 1) // 2, (width + 1) // 2)
    enc1 = x1
    for _ in range(2):
        enc1 = ((enc1[0] + 1) // 2, (enc1[1] + 1) // 2)
    return tail_fusable(enc1, x1)


def channel_argmax(logits: torch.Tensor) -> torch.Tensor:
    """``logits.argmax(1)[0]`` for ``(1, C, H, W)`` as ``uint8`` (C <= 256), first maximum on ties.

    One elementwise pass per class: several times faster than ``argmax`` over the strided
    channel axis of an NCHW tensor.
    """
    if logits.shape[0] != 1 or logits.shape[1] > 256:
        raise ValueError(f"expected logits (1, C<=256, H, W), got {tuple(logits.shape)}")
    planes = logits[0]
    best = planes[0].clone()
    labels = torch.zeros(planes.shape[1:], dtype=torch.uint8)
    for c in range(1, planes.shape[0]):
        better = torch.gt(planes[c], best)
        torch.maximum(best, planes[c], out=best)
        labels.masked_fill_(better, c)
    return labels


def _upsample(x: torch.Tensor, size: tuple[int, int] | torch.Size) -> torch.Tensor:
    return F.interpolate(x, size=size, mode="bilinear", align_corners=False)


def _block(block: StudentBlock, x: torch.Tensor) -> torch.Tensor:
    norm = block.preact_path[0]
    preact = F.relu(F.instance_norm(x, weight=norm.weight, bias=norm.bias, eps=norm.eps))
    if block.short_path is not None:
        short = block.short_path(preact)
    else:
        short = x[:, :, :: block.stride, :: block.stride] if block.stride > 1 else x
    return short + block.long_path(preact)


class FastStudent(nn.Module):
    """Inference-only view of a student: ``forward(frame uint8 (H, W, 3)) -> labels uint8 (H, W)``.

    It shares the student's parameters; after changing them call :meth:`refresh_head` (or
    use :meth:`load_weights`, which does). ``fuse_tail`` False keeps the tail unfused at every
    frame size (the ONNX graph for the frame sizes :func:`frame_tail_fusable` refuses).
    """

    def __init__(self, student: StudentNet, fuse_tail: bool = True) -> None:
        super().__init__()
        self.fuse_tail = fuse_tail
        if student.num_classes > 256:
            raise ValueError(f"labels are uint8: at most 256 classes, the student has {student.num_classes}")
        self.student = student
        self.register_buffer("pixel_mean", torch.tensor(PIXEL_MEAN_BGR, dtype=torch.float32).view(1, 3, 1, 1))
        weight, bias = fold_head(student)
        self.register_buffer("head_weight", weight)
        self.register_buffer("head_bias", bias)
        weight, bias = fold_tail(student, weight, bias)
        self.register_buffer("tail_weight", weight)
        self.register_buffer("tail_bias", bias)

    def refresh_head(self) -> None:
        """Recompute the folded head and tail from the student's current weights."""
        weight, bias = fold_head(self.student)
        self.head_weight.copy_(weight)
        self.head_bias.copy_(bias)
        weight, bias = fold_tail(self.student, weight, bias)
        self.tail_weight.copy_(weight)
        self.tail_bias.copy_(bias)

    def load_weights(self, update: Mapping[str, torch.Tensor]) -> None:
        """Install a (partial) student ``state_dict``; keys are the student's own."""
        check_update(self.student, update)
        self.student.load_state_dict(dict(update), strict=False)
        self.refresh_head()

    def logits(self, frame: torch.Tensor) -> torch.Tensor:
        """Class scores ``(1, C, H, W)`` for a BGR ``uint8`` frame tensor ``(H, W, 3)``."""
        s = self.student
        x = (frame.permute(2, 0, 1).unsqueeze(0).float() - self.pixel_mean).contiguous(
            memory_format=torch.channels_last
        )
        x1 = s.in_conv1(x)
        enc1 = _block(s.enc1, s.in_conv2(x1))
        enc2 = _block(s.enc2, enc1)
        dec1 = _upsample(_block(s.dec1, _block(s.enc3, enc2)), enc2.shape[2:])
        dec2 = _upsample(_block(s.dec2, torch.cat([dec1, enc2], dim=1)), enc1.shape[2:])
        dec3 = _block(s.dec3, torch.cat([dec2, enc1], dim=1))
        return _upsample(self.tail(dec3, x1.shape[2:]), x.shape[2:])

    def tail(self, dec3: torch.Tensor, x1_size: tuple[int, int] | torch.Size) -> torch.Tensor:
        """Class scores at in_conv1's resolution from the ``dec3`` block's output (before its upsampling)."""
        if not (self.fuse_tail and tail_fusable(dec3.shape[2:], x1_size)):
            return self._head(_upsample(dec3, x1_size), (1, 1, 1, 1))
        b, r = TAIL_BORDER, TAIL_UPSCALE
        height, width = dec3.shape[2], dec3.shape[3]
        padded = F.pad(dec3, (1, 1, 1, 1), mode="replicate")
        inner = F.pixel_shuffle(F.conv2d(padded, self.tail_weight, self.tail_bias), r)[:, :, b:-b, b:-b]
        # The border rows and columns from strips of the upsampled map (two dec3 rows give the
        # outer r upsampled ones exactly), through the 3x3 convolutions with their zero padding.
        top = self._head(_upsample(dec3[:, :, :2], (2 * r, r * width))[:, :, : 2 * b], (1, 1, 1, 0))
        bottom = self._head(_upsample(dec3[:, :, -2:], (2 * r, r * width))[:, :, -2 * b:], (1, 1, 0, 1))
        left = self._head(_upsample(dec3[:, :, :, :2], (r * height, 2 * r))[:, :, :, : 2 * b], (1, 0, 1, 1))
        right = self._head(_upsample(dec3[:, :, :, -2:], (r * height, 2 * r))[:, :, :, -2 * b:], (0, 1, 1, 1))
        middle = torch.cat([left[:, :, b:-b], inner, right[:, :, b:-b]], dim=3)
        return torch.cat([top, middle, bottom], dim=2)

    def _head(self, upsampled: torch.Tensor, padding: tuple[int, int, int, int]) -> torch.Tensor:
        """``head(out_conv1(upsampled))`` with zero ``padding`` (left, right, top, bottom) on the sides that are
        the frame's border."""
        s = self.student
        hidden = F.conv2d(F.pad(upsampled, padding), s.out_conv1.weight, s.out_conv1.bias)
        return F.conv2d(F.pad(hidden, padding), self.head_weight, self.head_bias)

    def forward(self, frame: torch.Tensor) -> torch.Tensor:
        """Labels ``uint8 (H, W)`` (plain ``argmax``: the form that exports to ONNX)."""
        return self.logits(frame).argmax(1)[0].to(torch.uint8)
