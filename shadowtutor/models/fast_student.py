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
  at a quarter of the frame's resolution, two thirds of the student's work, are gone. The outer
  blocks, where those convolutions read their zero padding, have kernels of their own.

The input is the raw BGR ``uint8`` frame ``(H, W, 3)``; the graph subtracts the pixel mean
itself, so the same module exports to ONNX with preprocessing and argmax inside.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping

import torch
import torch.nn.functional as F
from torch import nn

from shadowtutor.models.student import (
    PIXEL_MEAN_BGR,
    FrontFeatures,
    StudentBlock,
    StudentNet,
    conv_bias,
    map_sizes,
    upsample,
)


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
                f"update {key!r} has shape {tuple(value.shape)}, the student's is "
                f"{tuple(state[key].shape)}"
            )


def fold_head(student: StudentNet) -> tuple[torch.Tensor, torch.Tensor]:
    """Weight and bias of the single 3x3 conv equal to ``out_conv3(out_conv2(x))`` (differentiable
    in the student's weights: distillation trains through it; call under ``no_grad`` for inference
    buffers)."""
    return fold_head_weights(
        student.out_conv2.weight,
        conv_bias(student.out_conv2),
        student.out_conv3.weight,
        conv_bias(student.out_conv3),
    )


def fold_head_weights(
    w2: torch.Tensor, b2: torch.Tensor, w3: torch.Tensor, b3: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`fold_head` of ``out_conv2``'s weight ``(..., M, I, 3, 3)`` and bias ``(..., M)`` and
    ``out_conv3``'s ``(..., O, M, 1, 1)`` and ``(..., O)``: the folded weight ``(..., O, I, 3, 3)``
    and bias ``(..., O)``, for any leading axes (one student, or one per session stacked)."""
    w3 = w3[..., 0, 0]
    weight = torch.einsum("...om,...mikl->...oikl", w3, w2).contiguous()
    bias = torch.matmul(w3, b2.unsqueeze(-1)).squeeze(-1) + b3
    return weight, bias


# dec3's output is upsampled x4 to in_conv1's resolution (frame sizes like 640x360)
TAIL_UPSCALE = 4
# Where a block of the fused tail lies, row-major over (first, inner, last) block row x column: the
# convolutions' zero padding makes the first and last blocks' kernels differ from the inner ones.
TAIL_REGIONS = (
    "top_left",
    "top",
    "top_right",
    "left",
    "inner",
    "right",
    "bottom_left",
    "bottom",
    "bottom_right",
)


def fold_tail(
    student: StudentNet, head_weight: torch.Tensor, head_bias: torch.Tensor
) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """Per region of :data:`TAIL_REGIONS`, the weight ``(classes * 16, C, 3, 3)`` and bias of the
    3x3 convolution whose outputs, through ``pixel_shuffle(4)``, are
    ``head(out_conv1(upsample_x4(x)))`` at that region's blocks (``x`` padded by replication, as
    bilinear upsampling clamps).

    Per axis, output phase ``p`` reads out_conv1's output through head tap ``a`` and that reads the
    upsampled map through out_conv1 tap ``b``, at ``4i + p + a + b - 2``: a fixed mix of
    ``x[i - 1 .. i + 1]``, taken from PyTorch's own interpolation of unit impulses. In the first and
    last block the taps that read the convolutions' zero padding are left out. Differentiable in the
    student's weights, like :func:`fold_head`.
    """
    return fold_tail_weights(
        student.out_conv1.weight, conv_bias(student.out_conv1), head_weight, head_bias
    )


def fold_tail_weights(
    w1: torch.Tensor, b1: torch.Tensor, head_weight: torch.Tensor, head_bias: torch.Tensor
) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """:func:`fold_tail` of ``out_conv1``'s weight ``(..., M, C, 3, 3)`` and bias ``(..., M)`` and
    the folded head ``(..., K, M, 3, 3)``, ``(..., K)`` (:func:`fold_head_weights`): per region, the
    weight ``(..., K * 16, C, 3, 3)`` and bias ``(..., K * 16)``, for any leading axes."""
    mixes, tap_mix = _tail_mixes(w1.dtype, w1.device)
    lead = tuple(w1.shape[:-4])
    classes, channels = head_weight.shape[-4], w1.shape[-3]
    r = TAIL_UPSCALE
    # all nine regions at once: R and Q pick the (first, inner, last) mix of the block row and
    # column
    weights = torch.einsum(
        "...kmAB,...mcCD,RyACj,QxBDl->...RQkyxcjl", head_weight, w1, mixes, mixes
    )
    regions = len(TAIL_REGIONS)
    weights = weights.reshape(*lead, regions, classes * r * r, channels, 3, 3)
    # the biases: the head's bias, and out_conv1's through the head taps that read out_conv1's
    # output k A B
    through_head = torch.matmul(head_weight.movedim(-3, -1), b1[..., None, None, :, None]).squeeze(
        -1
    )
    # k B (R y)
    bias_rows = torch.matmul(through_head.transpose(-1, -2), tap_mix)
    # k R y Q x
    bias_both = torch.matmul(bias_rows.transpose(-1, -2), tap_mix).view(*lead, classes, 3, r, 3, r)
    biases = head_bias[..., :, None, None, None, None] + bias_both
    biases = biases.permute(*range(len(lead)), -4, -2, -5, -3, -1).reshape(
        *lead, regions, classes * r * r
    )
    return {
        region: (weight, bias)
        for region, weight, bias in zip(
            TAIL_REGIONS, weights.unbind(len(lead)), biases.unbind(len(lead)), strict=True
        )
    }


@functools.lru_cache(maxsize=8)
def _tail_mixes(dtype: torch.dtype, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`fold_tail`'s constants, per axis: the mixes ``(3, r, 3, 3, 3)`` (first, inner, last
    block; output phase; head tap; out_conv1 tap; input offset), and the head taps that read
    out_conv1's output as a matrix ``(3, 3 * r)`` from head tap to (block; output phase): plain
    tensors without gradients, whatever mode the first caller runs in."""
    r = TAIL_UPSCALE
    with torch.inference_mode(False), torch.no_grad():
        eye = torch.eye(7, dtype=dtype, device=device).unsqueeze(0)
        impulses = F.interpolate(eye, scale_factor=r, mode="linear", align_corners=False)[0]
        # mix[p, t, j]: weight of x[i + j - 1] in the upsampled position r * i + p + t - 2 (here i =
        # 3)
        mix = torch.stack([impulses[2:5, r * 3 + p - 2 : r * 3 + p + 3].t() for p in range(r)])
        p = torch.arange(r, device=device).view(r, 1, 1)
        a, b = (
            torch.arange(3, device=device).view(1, 3, 1),
            torch.arange(3, device=device).view(1, 1, 3),
        )
        inside = torch.ones(r, 3, 3, dtype=torch.bool, device=device)
        # head tap a within out_conv1's output: first, inner, last
        reads_hidden = (p + a >= 1, inside, p + a <= r)
        # and out_conv1 tap b within the upsampled map
        reads_up = (p + a + b >= 2, inside, p + a + b <= r + 1)
        mixes = torch.stack(
            [
                mix[:, (a + b).flatten()].view(r, 3, 3, 3) * (hidden & up).unsqueeze(3)
                for hidden, up in zip(reads_hidden, reads_up, strict=True)
            ]
        )
        hidden_taps = torch.stack([hidden[:, :, 0].to(dtype) for hidden in reads_hidden])
    return mixes, hidden_taps.permute(2, 0, 1).reshape(3, 3 * r)


def tail_fusable(
    dec3_size: tuple[int, int] | torch.Size, x1_size: tuple[int, int] | torch.Size
) -> bool:
    """Whether :func:`fold_tail` applies: in_conv1's output is exactly 4x dec3's (e.g. 640x360
    frames), and dec3's has an inner block in each direction."""
    return min(dec3_size) >= 3 and tuple(x1_size) == (
        TAIL_UPSCALE * dec3_size[0],
        TAIL_UPSCALE * dec3_size[1],
    )


def replicate_pad(x: torch.Tensor) -> torch.Tensor:
    """``x`` ``(N, C, H, W)`` with one more row above and below and one more column on each side,
    each a copy of its neighbour at the edge (``F.pad``'s ``replicate`` mode)."""
    return F.pad(x, (1, 1, 1, 1), mode="replicate")


def tail_scores(
    dec3: torch.Tensor,
    folded: Mapping[str, tuple[torch.Tensor, torch.Tensor]],
    conv: Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor] = F.conv2d,
) -> torch.Tensor:
    """``head(out_conv1(upsample_x4(dec3)))`` from :func:`fold_tail`'s kernels: ``(N, classes, 4h,
    4w)`` for ``dec3 (N, C, h, w)``, each region's 3x3 convolution (no padding) computed as
    ``conv(x, weight, bias)`` (``F.conv2d``; for kernels with a leading session axis, a convolution
    that gives each frame its own)."""
    height, width = dec3.shape[2], dec3.shape[3]
    padded = replicate_pad(dec3)
    # padded rows read by the first block row, the inner ones and the last; columns the same
    spans_y = (slice(0, 3), slice(1, height + 1), slice(height - 1, None))
    spans_x = (slice(0, 3), slice(1, width + 1), slice(width - 1, None))
    rows = []
    for row in range(3):
        parts = [
            conv(padded[:, :, spans_y[row], spans_x[col]], *folded[TAIL_REGIONS[3 * row + col]])
            for col in range(3)
        ]
        rows.append(torch.cat(parts, dim=3))
    return F.pixel_shuffle(torch.cat(rows, dim=2), TAIL_UPSCALE)


def frame_tail_fusable(height: int, width: int) -> bool:
    """:func:`tail_fusable` for a frame of ``height x width``."""
    sizes = map_sizes((height, width))
    return tail_fusable(sizes["enc1"], sizes["x1"])


def fused_back(student: StudentNet, front: FrontFeatures) -> torch.Tensor:
    """:meth:`StudentNet.forward_back` with the tail fused where :func:`tail_fusable` holds: the
    same function (rounded differently), differentiable in the back's weights, several times cheaper
    to train through (the two 32-channel convolutions at a quarter of the frame's resolution are
    gone, backward pass included)."""
    dec3 = student.forward_dec3(front)
    if not tail_fusable(dec3.shape[2:], front.x1_size):
        return student.forward_tail(dec3, front)
    return upsample(tail_scores(dec3, fold_tail(student, *fold_head(student))), front.input_size)


def fused_back_scores(student: StudentNet, front: FrontFeatures) -> torch.Tensor:
    """:func:`fused_back` without its last bilinear upsampling to the frame: ``(N, classes, x1
    height, x1 width)``. ValueError where the tail does not fuse (:func:`tail_fusable`: there the
    logits have no such form)."""
    dec3 = student.forward_dec3(front)
    if not tail_fusable(dec3.shape[2:], front.x1_size):
        raise ValueError(f"the tail does not fuse at an input of {tuple(front.input_size)}")
    return tail_scores(dec3, fold_tail(student, *fold_head(student)))


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


def _block(block: StudentBlock, x: torch.Tensor) -> torch.Tensor:
    norm = block.norm
    preact = F.relu(F.instance_norm(x, weight=norm.weight, bias=norm.bias, eps=norm.eps))
    if block.short_path is not None:
        short = block.short_path(preact)
    else:
        short = x[:, :, :: block.stride, :: block.stride] if block.stride > 1 else x
    return short + block.long_path(preact)


def per_frame_front(student: StudentNet, x: torch.Tensor) -> FrontFeatures:
    """:meth:`StudentNet.forward_front` of every frame of ``x (N, 3, H, W)`` on its own (each block
    normalised with its frame's statistics, as at batch 1): the front features of the N frames,
    stacked."""
    x1 = student.in_conv1(x)
    enc1 = _block(student.enc1, student.in_conv2(x1))
    enc2 = _block(student.enc2, enc1)
    dec1 = upsample(_block(student.dec1, _block(student.enc3, enc2)), enc2.shape[2:])
    return FrontFeatures(
        dec1=dec1,
        enc2=enc2,
        enc1=enc1,
        x1_size=(x1.shape[2], x1.shape[3]),
        input_size=(x.shape[2], x.shape[3]),
    )


class FastStudent(nn.Module):
    """Inference-only view of a student: ``forward(frame uint8 (H, W, 3)) -> labels uint8 (H, W)``.

    It shares the student's parameters; after changing them call :meth:`refresh_head` (or
    use :meth:`load_weights`, which does). ``fuse_tail`` False keeps the tail unfused at every
    frame size (the ONNX graph for the frame sizes :func:`frame_tail_fusable` refuses).
    """

    # buffers, registered in __init__ (and the tail's, by region)
    pixel_mean: torch.Tensor
    head_weight: torch.Tensor
    head_bias: torch.Tensor

    def __init__(self, student: StudentNet, fuse_tail: bool = True) -> None:
        super().__init__()
        self.fuse_tail = fuse_tail
        if student.num_classes > 256:
            raise ValueError(
                f"labels are uint8: at most 256 classes, the student has {student.num_classes}"
            )
        self.student = student
        self.register_buffer(
            "pixel_mean", torch.tensor(PIXEL_MEAN_BGR, dtype=torch.float32).view(1, 3, 1, 1)
        )
        with torch.no_grad():
            head_weight, head_bias = fold_head(student)
            folded = fold_tail(student, head_weight, head_bias)
        self.register_buffer("head_weight", head_weight)
        self.register_buffer("head_bias", head_bias)
        for region, (weight, bias) in folded.items():
            self.register_buffer(f"tail_{region}_weight", weight)
            self.register_buffer(f"tail_{region}_bias", bias)

    def refresh_head(self) -> None:
        """Recompute the folded head and tail from the student's current weights."""
        with torch.no_grad():
            head_weight, head_bias = fold_head(self.student)
            self.head_weight.copy_(head_weight)
            self.head_bias.copy_(head_bias)
            for region, (weight, bias) in fold_tail(self.student, head_weight, head_bias).items():
                getattr(self, f"tail_{region}_weight").copy_(weight)
                getattr(self, f"tail_{region}_bias").copy_(bias)

    def folded_tail(self) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
        """The buffers of :func:`fold_tail`'s kernels, by region."""
        return {
            region: (getattr(self, f"tail_{region}_weight"), getattr(self, f"tail_{region}_bias"))
            for region in TAIL_REGIONS
        }

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
        front = per_frame_front(s, x)
        dec2 = upsample(
            _block(s.dec2, torch.cat([front.dec1, front.enc2], dim=1)), front.enc1.shape[2:]
        )
        dec3 = _block(s.dec3, torch.cat([dec2, front.enc1], dim=1))
        return upsample(self.tail(dec3, front.x1_size), front.input_size)

    def tail(self, dec3: torch.Tensor, x1_size: tuple[int, int] | torch.Size) -> torch.Tensor:
        """Class scores at in_conv1's resolution from the ``dec3`` block's output (before its
        upsampling)."""
        if self.fuse_tail and tail_fusable(dec3.shape[2:], x1_size):
            return tail_scores(dec3, self.folded_tail())
        hidden = self.student.out_conv1(upsample(dec3, x1_size))
        return F.conv2d(hidden, self.head_weight, self.head_bias, padding=1)

    def forward(self, frame: torch.Tensor) -> torch.Tensor:
        """Labels ``uint8 (H, W)`` (plain ``argmax``: the form that exports to ONNX)."""
        return self.logits(frame).argmax(1)[0].to(torch.uint8)
