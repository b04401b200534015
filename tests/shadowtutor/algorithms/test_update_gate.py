"""The update gate: what it scores, when it sends, and what a held-back answer reports."""

from __future__ import annotations

import pytest
import torch

from shadowtutor.algorithms.distill import Distiller
from shadowtutor.algorithms.params import AlgorithmParams
from shadowtutor.algorithms.sparse_options import SparseOptions
from shadowtutor.algorithms.update_gate import UpdateGate, score
from shadowtutor.algorithms.update_policy import UpdatePolicy
from shadowtutor.models.student import StudentNet
from tests.support.scene import make_frames

PARAMS = AlgorithmParams(max_updates=4, threshold=0.99, learning_rate=0.05)


def distiller() -> Distiller:
    torch.manual_seed(0)
    return Distiller(StudentNet(3), PARAMS, background=2)


def held_copy(d: Distiller) -> dict[str, torch.Tensor]:
    return {key: value.detach().clone() for key, value in d.student.state_dict().items()}


@pytest.mark.parametrize(
    "fields",
    [{"min_gain": -0.1}, {"min_gain": 1.5}, {"max_interval": 0}, {"window": 0},
     {"downlink_bps": 0.0}, {"budget_seconds": 0.5}],
)
def test_a_policy_out_of_range_is_refused(fields: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        UpdatePolicy(gated=True, **fields)  # type: ignore[arg-type]


def test_an_ungated_policy_has_no_gate() -> None:
    with pytest.raises(ValueError, match="gated"):
        UpdateGate(UpdatePolicy())


def test_score_uses_the_given_weights_and_leaves_the_student_alone() -> None:
    d = distiller()
    frames, labels = make_frames(1)
    key_frame = d.prepare_on_host(frames[0], labels[0])
    before = held_copy(d)
    zeroed = {key: torch.zeros_like(value) for key, value in before.items() if key.startswith("out_conv3")}
    own, other = score(d, {}, [key_frame]), score(d, zeroed, [key_frame])
    assert own != other
    for key, value in d.student.state_dict().items():
        assert torch.equal(value, before[key]), key


def test_training_that_scores_higher_is_sent_and_none_is_held_back() -> None:
    d = distiller()
    frames, labels = make_frames(2)
    held = held_copy(d)
    gate = UpdateGate(UpdatePolicy(gated=True, min_gain=0.01))
    result = d.train(frames[0], labels[0])
    first = gate.decide(d, d.prepare_on_host(frames[0], labels[0]), result.weights, held, now=0.0)
    assert first.send and first.reason == "gain" and first.gain >= 0.01
    assert first.metric_after() == first.server_metric > first.edge_metric
    gate.answered(0.0, 5000, sent=True)
    # the edge now holds what the server has: nothing to gain
    held = held_copy(d)
    second = gate.decide(d, d.prepare_on_host(frames[1], labels[1]), {}, held, now=1.0)
    assert not second.send and second.reason == "no_gain" and second.gain == 0.0
    assert second.metric_after() == second.edge_metric == second.server_metric
    gate.answered(1.0, 200, sent=False)
    assert gate.since_sent == 1


def test_a_small_gain_waits_for_the_interval() -> None:
    d = distiller()
    frames, labels = make_frames(3)
    held = held_copy(d)
    gate = UpdateGate(UpdatePolicy(gated=True, min_gain=1.0, max_interval=2))
    verdicts = []
    for index in range(2):
        result = d.train(frames[index], labels[index])
        decision = gate.decide(d, d.prepare_on_host(frames[index], labels[index]), result.weights, held,
                               now=float(index))
        gate.answered(float(index), 100, decision.send)
        verdicts.append((decision.send, decision.reason))
    assert verdicts == [(False, "no_gain"), (True, "interval")]


def test_a_downlink_budget_holds_updates_back_until_its_window_has_room() -> None:
    d = distiller()
    frames, labels = make_frames(1)
    held = held_copy(d)
    result = d.train(frames[0], labels[0])
    key_frame = d.prepare_on_host(frames[0], labels[0])
    # 8,000 bit/s over 10 s: 10,000 bytes
    gate = UpdateGate(UpdatePolicy(gated=True, min_gain=0.0, downlink_bps=8000.0, budget_seconds=10.0))
    assert gate.decide(d, key_frame, result.weights, held, now=0.0).send  # no update cost known yet
    gate.answered(0.0, 6000, sent=True)
    blocked = gate.decide(d, key_frame, result.weights, held, now=5.0)
    assert (blocked.send, blocked.reason) == (False, "budget")
    gate.answered(5.0, 100, sent=False)
    assert gate.downlink_bps(5.0) == pytest.approx(8 * 6100 / 10.0)
    # the first update left the window
    assert gate.decide(d, key_frame, result.weights, held, now=10.5).send


def test_a_sparse_distiller_about_to_choose_another_set_must_send() -> None:
    d = distiller()
    d.train_sparse(SparseOptions(fraction=0.1, every=1))
    frames, labels = make_frames(1)
    held = held_copy(d)
    result = d.train(frames[0], labels[0])
    gate = UpdateGate(UpdatePolicy(gated=True, min_gain=1.0, max_interval=100, downlink_bps=1.0))
    gate.answered(0.0, 10**6, sent=True)  # the budget is spent
    decision = gate.decide(d, d.prepare_on_host(frames[0], labels[0]), result.weights, held, now=1.0)
    assert (decision.send, decision.reason) == (True, "must_send")
