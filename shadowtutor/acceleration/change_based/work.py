"""How much of the student's arithmetic each threshold point feeds, and what skipping it could gain.

Change-based execution can at best skip the multiply-adds of positions whose input did not change.
:func:`point_work` counts, per threshold point (:data:`~.thresholds.THRESHOLD_NAMES`), the
multiply-adds of the convolutions that read that input at one frame size; :func:`work_bound` turns
measured changed fractions into the speed-up a change-based student would reach if only changed
positions cost anything: no gathering or scattering, and no neighbour of a changed position
recomputed (each output of a 3x3 convolution reads nine inputs, so in truth more must be). It is an
upper bound: a gap between it and a target is a property of the network and its thresholds, not of
the implementation.
"""

from __future__ import annotations

from collections.abc import Mapping

from torch import nn

from shadowtutor.acceleration.change_based.thresholds import THRESHOLD_NAMES
from shadowtutor.models.fast_student import TAIL_UPSCALE
from shadowtutor.models.student import (
    StudentBlock,
    StudentNet,
    block_input_sizes,
    conv_output_size,
    map_sizes,
)

Size = tuple[int, int]


def _conv_work(conv: nn.Conv2d, out_size: Size) -> int:
    """Multiply-adds of ``conv`` producing an ``out_size`` map."""
    kernel = conv.kernel_size[0] * conv.kernel_size[1]
    return (
        out_size[0] * out_size[1] * conv.out_channels * (conv.in_channels // conv.groups) * kernel
    )


def _block_work(block: StudentBlock, in_size: Size) -> dict[str, int]:
    out_size = conv_output_size(in_size, block.stride)
    first, conv2, conv3 = block.convs
    short = 0 if block.short_path is None else _conv_work(block.short_path, out_size)
    return {
        "": _conv_work(first, out_size) + short,
        ".conv2": _conv_work(conv2, out_size),
        ".conv3": _conv_work(conv3, out_size),
    }


def point_work(student: StudentNet, size: Size, fused_tail: bool = True) -> dict[str, int]:
    """Multiply-adds fed by each threshold point for ``(height, width)`` frames.

    ``fused_tail``: the tail as one 3x3 convolution at dec3's resolution with ``classes * 16``
    outputs (:func:`~shadowtutor.models.fast_student.fold_tail`); else ``out_conv1`` and the folded
    head, two 3x3 convolutions at in_conv1's resolution. ``output`` (argmax and upsampling) has
    none.
    """
    sizes = map_sizes(size)
    # the tail reads dec3, at enc1's size
    (x1_h, x1_w), (dec3_h, dec3_w) = sizes["x1"], sizes["enc1"]
    work = {
        "in_conv1": _conv_work(student.in_conv1, sizes["x1"]),
        "in_conv2": _conv_work(student.in_conv2, sizes["x2"]),
    }
    for name, in_size in block_input_sizes(size).items():
        for point, count in _block_work(getattr(student, name), in_size).items():
            work[f"{name}{point}"] = count
    hidden = student.out_conv1.in_channels
    if fused_tail:
        work["tail"] = dec3_h * dec3_w * student.num_classes * TAIL_UPSCALE**2 * hidden * 9
    else:
        work["tail"] = (
            x1_h * x1_w * 9 * hidden * (student.out_conv1.out_channels + student.num_classes)
        )
    work["output"] = 0
    assert set(work) == set(THRESHOLD_NAMES)
    return work


def work_bound(changed: Mapping[str, float], work: Mapping[str, int]) -> float:
    """Full work over the work at the changed fractions (``changed``: per threshold point, 0..1)."""
    total = sum(work.values())
    spent = sum(changed[name] * count for name, count in work.items())
    return float("inf") if spent == 0 else total / spent
