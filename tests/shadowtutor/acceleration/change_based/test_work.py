from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from shadowtutor.acceleration.change_based.thresholds import THRESHOLD_NAMES
from shadowtutor.acceleration.change_based.work import point_work, work_bound
from shadowtutor.models.student import StudentNet

TAIL_MODULES = ("out_conv1", "out_conv2", "out_conv3")


def _counted_work(student: StudentNet, size: tuple[int, int]) -> int:
    """Multiply-adds of every convolution before the tail, counted on a real forward pass."""
    total = 0

    def count(module: nn.Conv2d, _inputs, output: torch.Tensor) -> None:
        nonlocal total
        kernel = module.kernel_size[0] * module.kernel_size[1]
        total += output.shape[2] * output.shape[3] * module.out_channels * module.in_channels * kernel

    hooks = [module.register_forward_hook(count) for name, module in student.named_modules()
             if isinstance(module, nn.Conv2d) and name not in TAIL_MODULES]
    with torch.no_grad():
        student.forward_dec3(student.forward_front(torch.zeros(1, 3, *size)))
    for hook in hooks:
        hook.remove()
    return total


@pytest.mark.parametrize("size", [(360, 640), (180, 320), (101, 67)])
def test_the_work_before_the_tail_is_what_the_network_computes(size) -> None:
    student = StudentNet().eval()
    work = point_work(student, size)
    assert set(work) == set(THRESHOLD_NAMES) and work["output"] == 0
    assert sum(work.values()) - work["tail"] == _counted_work(student, size)


def test_the_fused_tail_is_one_3x3_convolution_at_dec3s_resolution() -> None:
    student = StudentNet(num_classes=9)
    fused = point_work(student, (360, 640))["tail"]
    unfused = point_work(student, (360, 640), fused_tail=False)["tail"]
    assert fused == 45 * 80 * 9 * 16 * 32 * 9  # dec3 is 45x80 for 640x360 frames
    assert unfused == 180 * 320 * 9 * 32 * (32 + 9)


def test_the_bound_is_the_full_work_over_the_changed_work() -> None:
    work = point_work(StudentNet(), (360, 640))
    assert work_bound(dict.fromkeys(work, 1.0), work) == pytest.approx(1.0)
    assert work_bound(dict.fromkeys(work, 0.25), work) == pytest.approx(4.0)
    only_tail = {**dict.fromkeys(work, 0.0), "tail": 1.0}
    assert work_bound(only_tail, work) == pytest.approx(sum(work.values()) / work["tail"])
    assert math.isinf(work_bound(dict.fromkeys(work, 0.0), work))
