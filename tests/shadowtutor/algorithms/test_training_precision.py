"""Training at ``bf16``, alone and in the batched engine: the convolutions and matrix products run in bfloat16, while
the weights (the copy the edge is sent), their gradients, Adam's state, the loss and the metric stay float32."""

from __future__ import annotations

import copy
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from shadowtutor.algorithms import batched_objective, distill
from shadowtutor.algorithms.batched_distill import KeyFrameJob, distill_batch
from shadowtutor.algorithms.distill import Distiller
from shadowtutor.algorithms.params import AlgorithmParams
from shadowtutor.models.student import StudentNet

PRODUCTS = {torch.ops.aten.convolution.default, torch.ops.aten.convolution_backward.default,
            torch.ops.aten.baddbmm.default, torch.ops.aten.bmm.default}
PARAMS = AlgorithmParams(threshold=0.999, max_updates=3)


class _ProductDtypes(TorchDispatchMode):
    """Counts the dtypes of the first input of every convolution and batched matrix product (and their backward)."""

    def __init__(self) -> None:
        super().__init__()
        self.dtypes: Counter[torch.dtype] = Counter()

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        if func in PRODUCTS:
            self.dtypes[args[0].dtype] += 1
        return func(*args, **(kwargs or {}))


def _key_frame(session: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(session)
    frame = rng.integers(60, 200, (48, 64, 3), dtype=np.uint8)
    label = np.zeros((48, 64), np.uint8)
    label[6 + session:30 + session, 4:30] = 1
    label[28:44, 34 + session:60] = 2
    frame[label == 1] //= 3
    frame[label == 2] = 255 - frame[label == 2] // 4
    return frame, label


@contextmanager
def _loss_inputs(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[torch.dtype]]:
    """Records the dtype of the logits or scores each loss (sequential and batched) is computed from."""
    seen: list[torch.dtype] = []
    sequential, batched = distill.weighted_cross_entropy, batched_objective.weighted_loss

    def sequential_spy(logits: torch.Tensor, *args: Any) -> torch.Tensor:
        seen.append(logits.dtype)
        return sequential(logits, *args)

    def batched_spy(scores: torch.Tensor, *args: Any) -> torch.Tensor:
        seen.append(scores.dtype)
        return batched(scores, *args)

    monkeypatch.setattr(distill, "weighted_cross_entropy", sequential_spy)
    monkeypatch.setattr(batched_objective, "weighted_loss", batched_spy)
    yield seen


def _assert_float32_state(distiller: Distiller) -> None:
    assert {p.dtype for p in distiller.student.parameters()} == {torch.float32}
    assert {g.dtype for g in (p.grad for p in distiller.student.parameters()) if g is not None} <= {torch.float32}
    state = distiller.optimizer.state.values()
    assert state and {s[k].dtype for s in state for k in ("exp_avg", "exp_avg_sq")} == {torch.float32}


@pytest.mark.parametrize("mode", ["partial", "full"])
@pytest.mark.parametrize("fuse_tail", [False, True], ids=["tail as written", "fused tail"])
def test_a_bf16_distiller_runs_its_products_in_bfloat16_and_keeps_the_rest_float32(
    monkeypatch: pytest.MonkeyPatch, mode: str, fuse_tail: bool
) -> None:
    torch.manual_seed(0)
    base = StudentNet(num_classes=3)
    params = PARAMS.replace(mode=mode)  # type: ignore[arg-type]
    frame, label = _key_frame(0)
    reference = Distiller(copy.deepcopy(base), params, background=0, fuse_tail=fuse_tail)
    want = reference.train(frame, label)
    bf16 = Distiller(copy.deepcopy(base), params, background=0, fuse_tail=fuse_tail, precision="bf16")
    with _loss_inputs(monkeypatch) as losses, _ProductDtypes() as products:
        got = bf16.train(frame, label)
    assert products.dtypes[torch.bfloat16] > 0
    if mode == "partial":  # the frozen front once per key frame, in float32; every product of the back in bfloat16
        with torch.no_grad(), _ProductDtypes() as front:
            reference.student.forward_front(reference.prepare(frame, label).x)
        assert products.dtypes[torch.float32] == front.dtypes[torch.float32] > 0
    else:
        assert products.dtypes[torch.float32] == 0
    assert losses == [torch.float32] * got.steps
    _assert_float32_state(bf16)
    assert {w.dtype for w in got.weights.values()} == {torch.float32}
    # rounded in bfloat16, the training moves elsewhere, but not far: the same start, metrics close
    assert got.initial_metric == pytest.approx(want.initial_metric, abs=0.02)
    assert got.metric == pytest.approx(want.metric, abs=0.1)
    assert any(not torch.equal(got.weights[k], want.weights[k]) for k in want.weights)


def test_the_engine_trains_a_bf16_group_in_bfloat16_near_each_sessions_own_bf16_distiller(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    torch.manual_seed(1)
    base = StudentNet(num_classes=3)
    frames = [_key_frame(s) for s in range(3)]

    def distillers(precision: str) -> list[Distiller]:
        return [Distiller(copy.deepcopy(base), PARAMS, background=0, fuse_tail=True, precision=precision)  # type: ignore[arg-type]
                for _ in frames]

    alone = [d.train(*f) for d, f in zip(distillers("bf16"), frames, strict=True)]
    fp32 = distill_batch([KeyFrameJob.prepare(d, *f) for d, f in zip(distillers("fp32"), frames, strict=True)])
    engine = distillers("bf16")
    with _loss_inputs(monkeypatch) as losses, _ProductDtypes() as products:
        got = distill_batch([KeyFrameJob.prepare(d, *f) for d, f in zip(engine, frames, strict=True)])
    assert products.dtypes[torch.bfloat16] > 0 and losses == [torch.float32] * PARAMS.max_updates
    for distiller, result, own, plain in zip(engine, got, alone, fp32, strict=True):
        _assert_float32_state(distiller)
        assert {w.dtype for w in result.weights.values()} == {torch.float32}
        assert {v["exp_avg"].dtype for v in result.optimizer_state["state"].values()} == {torch.float32}
        # the engine's stacked back and the session's own back round differently in bfloat16
        assert result.initial_metric == pytest.approx(own.initial_metric, abs=0.02)
        assert result.metric == pytest.approx(own.metric, abs=0.1)
        assert any(not torch.equal(result.weights[k], plain.weights[k]) for k in plain.weights)
        for key, tensor in distiller.student.state_dict().items():  # what the UPDATE carries is the student
            if key in result.weights:
                assert torch.equal(result.weights[key], tensor), key
