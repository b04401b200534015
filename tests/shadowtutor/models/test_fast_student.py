from __future__ import annotations

import numpy as np
import pytest
import torch
from skimage import data

from shadowtutor.models.fast_student import (
    FastStudent,
    WeightUpdateError,
    channel_argmax,
    check_update,
    fold_head,
    fold_tail,
    frame_tail_fusable,
    per_frame_front,
    tail_scores,
)
from shadowtutor.models.student import StudentNet, normalise_frame


def _photo(height: int, width: int) -> np.ndarray:
    import cv2

    return np.ascontiguousarray(cv2.resize(data.astronaut()[:, :, ::-1], (width, height)))


@pytest.mark.parametrize("size", [(64, 96), (75, 133), (360, 640), (100, 150)])
def test_labels_agree_with_the_straightforward_student(size: tuple[int, int]) -> None:
    torch.manual_seed(1)
    student = StudentNet(9).eval()
    frame = _photo(*size)
    with torch.no_grad():
        reference = student(normalise_frame(frame))
        fast = FastStudent(student)
        logits = fast.logits(torch.from_numpy(frame))
        labels = fast(torch.from_numpy(frame)).numpy()
    assert logits.shape == reference.shape
    torch.testing.assert_close(logits, reference, rtol=1e-3, atol=1e-3 * float(reference.abs().max()))
    assert np.mean(labels == reference.argmax(1)[0].numpy()) >= 0.99


def test_folded_head_is_out_conv3_after_out_conv2() -> None:
    torch.manual_seed(2)
    student = StudentNet(4)
    x = torch.randn(1, 32, 10, 12)
    weight, bias = fold_head(student)
    with torch.no_grad():
        expected = student.out_conv3(student.out_conv2(x))
        folded = torch.nn.functional.conv2d(x, weight, bias, padding=1)
    torch.testing.assert_close(folded, expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("size", [(7, 11), (3, 3), (4, 9)])
def test_folded_tail_is_the_upsampled_head_everywhere(size: tuple[int, int]) -> None:
    torch.manual_seed(6)
    student = StudentNet(9)
    torch.nn.init.normal_(student.out_conv1.bias)  # non-zero: the border kernels leave out padded taps' bias
    x = torch.randn(1, 32, *size)
    head_weight, head_bias = fold_head(student)
    with torch.no_grad():
        upsampled = torch.nn.functional.interpolate(x, scale_factor=4, mode="bilinear", align_corners=False)
        expected = torch.nn.functional.conv2d(student.out_conv1(upsampled), head_weight, head_bias, padding=1)
        folded = tail_scores(x, fold_tail(student, head_weight, head_bias))
    torch.testing.assert_close(folded, expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(("size", "fusable"), [
    ((360, 640), True), ((720, 1280), True), ((64, 96), True),
    ((16, 96), False), ((75, 133), False), ((100, 150), False), ((362, 640), False),
])
def test_the_tail_is_fused_where_the_upsampling_is_exactly_x4(size: tuple[int, int], fusable: bool) -> None:
    assert frame_tail_fusable(*size) is fusable


def test_channel_argmax_matches_argmax_and_takes_the_first_of_ties() -> None:
    logits = torch.randn(1, 7, 13, 17)
    assert torch.equal(channel_argmax(logits).long(), logits.argmax(1)[0])
    tied = torch.zeros(1, 3, 2, 2)
    tied[0, 1:, 0, 0] = 5.0
    assert channel_argmax(tied)[0, 0] == 1
    assert channel_argmax(tied)[1, 1] == 0
    with pytest.raises(ValueError, match="logits"):
        channel_argmax(torch.zeros(2, 3, 4, 4))


def test_load_weights_updates_the_folded_head() -> None:
    torch.manual_seed(3)
    fast = FastStudent(StudentNet(9).eval())
    other = StudentNet(9)
    update = {k: v for k, v in other.state_dict().items() if k in other.trainable_keys("partial")}
    fast.load_weights(update)
    weight, bias = fold_head(other)
    torch.testing.assert_close(fast.head_weight, weight)
    torch.testing.assert_close(fast.head_bias, bias)
    for region, folded in fold_tail(other, weight, bias).items():
        torch.testing.assert_close(fast.folded_tail()[region], folded)
    assert torch.equal(fast.student.dec2.long_path[0].weight, other.dec2.long_path[0].weight)


def test_bad_updates_are_refused() -> None:
    student = StudentNet(9)
    with pytest.raises(WeightUpdateError, match="does not have"):
        check_update(student, {"nope.weight": torch.zeros(1)})
    with pytest.raises(WeightUpdateError, match="shape"):
        check_update(student, {"out_conv3.bias": torch.zeros(4)})


def test_the_fused_tail_is_built_on_the_weights_device() -> None:
    """A server distils on its GPU: no helper tensor of the fold may stay on the CPU. (No GPU here: the
    meta device, which refuses to mix with CPU tensors just as CUDA does, stands in for it.)"""
    from shadowtutor.models.fast_student import fused_back

    student = StudentNet(9).to("meta")
    folded = fold_tail(student, *fold_head(student))
    assert all(w.device.type == "meta" and b.device.type == "meta" for w, b in folded.values())
    front = student.forward_front(torch.zeros(1, 3, 64, 96, device="meta"))
    assert fused_back(student, front).shape == (1, 9, 64, 96)


def test_the_fused_backs_scores_are_its_logits_before_the_last_upsampling() -> None:
    from shadowtutor.models.fast_student import fused_back, fused_back_scores

    torch.manual_seed(0)
    student = StudentNet(9).double()
    front = student.forward_front(torch.randn(1, 3, 64, 96, dtype=torch.float64))
    scores = fused_back_scores(student, front)
    assert scores.shape == (1, 9, 32, 48)  # in_conv1's resolution
    upsampled = torch.nn.functional.interpolate(scores, size=(64, 96), mode="bilinear", align_corners=False)
    torch.testing.assert_close(upsampled, fused_back(student, front), rtol=0, atol=0)
    with pytest.raises(ValueError, match="does not fuse at an input of"):
        fused_back_scores(student, student.forward_front(torch.randn(1, 3, 180, 320, dtype=torch.float64)))


def test_the_front_of_several_frames_is_each_frames_own() -> None:
    """Each frame normalised with its own statistics, as the student's BatchNorm does at batch 1."""
    torch.manual_seed(0)
    student = StudentNet(5).double()
    frames = torch.randn(3, 3, 72, 128, dtype=torch.float64) * torch.tensor([1.0, 5.0, 0.2]).view(3, 1, 1, 1)
    got = per_frame_front(student, frames)
    for index in range(3):
        want = student.forward_front(frames[index:index + 1])
        for name in ("dec1", "enc2", "enc1"):
            torch.testing.assert_close(getattr(got, name)[index:index + 1], getattr(want, name), rtol=0, atol=1e-10)
        assert got.x1_size == want.x1_size and got.input_size == want.input_size
