"""The student's back for a batch of sessions equals each session's own back, forward and gradients."""

from __future__ import annotations

import pytest
import torch

from shadowtutor.algorithms.engine_options import CONVOLUTIONS, Convolution
from shadowtutor.algorithms.stacked_back import StackedBack
from shadowtutor.models.fast_student import frame_tail_fusable, fused_back, fused_back_scores
from shadowtutor.models.student import FrontFeatures, StudentNet

SESSIONS = 3


def sessions_and_fronts(size: tuple[int, int]) -> tuple[list[StudentNet], list[FrontFeatures]]:
    """Three students of different weights (one front: the first's), each with its own frame's front features."""
    torch.manual_seed(0)
    students = [StudentNet(5).double() for _ in range(SESSIONS)]
    frames = torch.randn(SESSIONS, 1, 3, *size, dtype=torch.float64)
    with torch.no_grad():
        fronts = [students[0].forward_front(frame) for frame in frames]
    return students, fronts


def stacked(students: list[StudentNet], fronts: list[FrontFeatures]) -> tuple[dict[str, torch.Tensor], ...]:
    keys = students[0].trainable_keys("partial")
    weights = {key: torch.stack([dict(s.named_parameters())[key].detach() for s in students]).requires_grad_()
               for key in keys}
    features = {name: torch.cat([getattr(f, name) for f in fronts]) for name in ("dec1", "enc2", "enc1")}
    return weights, features


@pytest.mark.parametrize("convolution", CONVOLUTIONS)
@pytest.mark.parametrize(("size", "tail"), [
    ((72, 128), "written"), ((72, 128), "fused"), ((72, 128), "scores"), ((70, 130), "fused"),
])
def test_each_session_gets_its_own_back_and_gradients(
    convolution: Convolution, size: tuple[int, int], tail: str
) -> None:
    students, fronts = sessions_and_fronts(size)
    assert frame_tail_fusable(*size) == (size == (72, 128))  # 70x130: the fused tail falls back to the written
    weights, features = stacked(students, fronts)
    back = StackedBack(students[0], convolution, fuse_tail=tail != "written", scores_only=tail == "scores")
    got = back(weights, features["dec1"], features["enc2"], features["enc1"], fronts[0].x1_size,
               fronts[0].input_size)
    own = {"written": StudentNet.forward_back, "fused": fused_back, "scores": fused_back_scores}[tail]
    want = [own(student, front) for student, front in zip(students, fronts, strict=True)]
    torch.testing.assert_close(got, torch.cat(want), rtol=0, atol=1e-10)
    grad_out = torch.randn_like(got)
    got_grads = torch.autograd.grad(got, list(weights.values()), grad_out)
    for index, (student, logits) in enumerate(zip(students, want, strict=True)):
        params = dict(student.named_parameters())
        want_grads = torch.autograd.grad(logits, [params[key] for key in weights], grad_out[index:index + 1])
        for key, g, w in zip(weights, got_grads, want_grads, strict=True):
            torch.testing.assert_close(g[index], w, rtol=0, atol=1e-9, msg=key)


def test_scores_only_is_refused_where_the_tail_does_not_fuse() -> None:
    students, fronts = sessions_and_fronts((70, 130))
    weights, features = stacked(students, fronts)
    back = StackedBack(students[0], "grouped", fuse_tail=True, scores_only=True)
    with pytest.raises(ValueError, match="does not fuse"):
        back(weights, features["dec1"], features["enc2"], features["enc1"], fronts[0].x1_size, fronts[0].input_size)
