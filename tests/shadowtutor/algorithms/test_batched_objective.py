"""The batched loss and metric: eager and compiled forms of the same functions, each session's own."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from shadowtutor.algorithms.batched_objective import BatchedObjective, batched_miou, logits_of
from shadowtutor.algorithms.loss import weighted_cross_entropy
from shadowtutor.algorithms.metrics import miou

CLASSES = 4


def test_batched_miou_equals_miou_per_session() -> None:
    rng = np.random.default_rng(3)
    pred = torch.as_tensor(rng.integers(0, 4, (5, 7, 9)))
    label = torch.as_tensor(rng.integers(0, 3, (5, 7, 9)))
    label[2] = 0
    pred[2] = 0  # one class present only: IoU 1
    got = batched_miou(pred, label, 4)
    for s in range(5):
        assert float(got[s]) == pytest.approx(miou(pred[s], label[s], 4), abs=1e-6)


def test_batched_miou_reads_nothing_back_from_its_device() -> None:
    """On the meta device a tensor has no values: an operation that needs them on the host (``bincount``
    sizing its output, ``.item()``) fails there, so this runs only if the metric reads nothing back."""
    pred = torch.zeros(3, 8, 8, dtype=torch.long, device="meta")
    with pytest.raises((NotImplementedError, RuntimeError)):
        torch.bincount(pred.reshape(-1))  # the check can fail: what a host read does on the meta device
    got = batched_miou(pred, pred, 4)
    assert got.device.type == "meta" and got.shape == (3,)


def _batch(sessions: int, size: tuple[int, int], upsampled: bool, seed: int) -> tuple[torch.Tensor, ...]:
    """Scores (at half the frame's size where ``upsampled``), teacher labels and loss weights of a batch."""
    generator = torch.Generator().manual_seed(seed)
    height, width = size
    scores_size = (height // 2, width // 2) if upsampled else size
    scores = torch.randn(sessions, CLASSES, *scores_size, generator=generator, dtype=torch.float64)
    target = torch.randint(0, CLASSES - 1, (sessions, height, width), generator=generator)  # one class unused
    weights = 1 + 4 * torch.rand(sessions, height, width, generator=generator, dtype=torch.float64)
    return scores, target, weights


@pytest.mark.parametrize("upsampled", [False, True], ids=["logits", "scores upsampled"])
def test_the_eager_objective_is_each_sessions_own_loss_and_metric(upsampled: bool) -> None:
    size = (12, 16)
    scores, target, weights = _batch(3, size, upsampled, seed=1)
    objective = BatchedObjective(target, weights, CLASSES, upsample_to=size if upsampled else None, compiled=False)
    logits = logits_of(scores, size if upsampled else None)
    assert logits.shape == (3, CLASSES, *size)
    want_loss = sum(weighted_cross_entropy(logits[s:s + 1], target[s], weights[s]) for s in range(3))
    assert float(objective.loss(scores)) == pytest.approx(float(want_loss), rel=1e-12)
    got = objective.miou(scores)
    for s in range(3):
        assert float(got[s]) == pytest.approx(miou(logits[s].argmax(0), target[s], CLASSES), abs=1e-12)


def test_the_compiled_objective_equals_the_eager_one() -> None:
    """torch.compile's inductor on this CPU (C++ kernels; on a GPU, Triton's): the same loss and gradient within
    float64 rounding and the same metric, for a batch of scores upsampled to the frame and for another session
    count (the recompile with a dynamic session axis)."""
    size = (12, 16)
    for sessions, seed in ((3, 2), (5, 3)):
        scores, target, weights = _batch(sessions, size, upsampled=True, seed=seed)
        eager = BatchedObjective(target, weights, CLASSES, upsample_to=size, compiled=False)
        compiled = BatchedObjective(target, weights, CLASSES, upsample_to=size, compiled=True)
        gradients = []
        for objective in (eager, compiled):
            leaf = scores.clone().requires_grad_(True)
            loss = objective.loss(leaf)
            (gradient,) = torch.autograd.grad(loss, [leaf])
            gradients.append((float(loss.detach()), gradient))
        assert gradients[1][0] == pytest.approx(gradients[0][0], rel=1e-12)
        torch.testing.assert_close(gradients[1][1], gradients[0][1], rtol=1e-10, atol=1e-14)
        assert torch.equal(compiled.miou(scores), eager.miou(scores))
