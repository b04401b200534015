from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from shadowtutor.algorithms.distill import Distiller
from shadowtutor.algorithms.loss import object_weight_map, weighted_cross_entropy
from shadowtutor.algorithms.metrics import miou
from shadowtutor.algorithms.params import AlgorithmParams
from shadowtutor.models.student import StudentNet, normalise_frame


def _scene(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """A 64x96 frame with two coloured rectangles on grey and its exact labels (bg = 2)."""
    frame = np.full((64, 96, 3), 128, np.uint8)
    label = np.full((64, 96), 2, np.uint8)
    frame[10:40, 8:40] = (30, 30, 220)
    label[10:40, 8:40] = 0
    frame[30:60, 55:90] = (220, 60, 20)
    label[30:60, 55:90] = 1
    noise = np.random.default_rng(seed).integers(-10, 10, frame.shape)
    return np.clip(frame + noise, 0, 255).astype(np.uint8), label


def _student() -> StudentNet:
    torch.manual_seed(0)
    return StudentNet(num_classes=3)


def _evaluate(student: StudentNet, frame: np.ndarray, label: np.ndarray) -> float:
    with torch.no_grad():
        return miou(student(normalise_frame(frame)).argmax(1)[0], label, student.num_classes)


def test_skips_training_when_the_first_metric_passes() -> None:
    frame, _ = _scene()
    student = _student()
    own_labels = student(normalise_frame(frame)).argmax(1)[0].numpy().astype(np.uint8)
    before = {k: v.clone() for k, v in student.state_dict().items()}
    result = Distiller(student, AlgorithmParams(), background=2).train(frame, own_labels)
    assert result.skipped and result.steps == 0 and result.metric == 1.0
    assert all(torch.equal(before[k], v) for k, v in student.state_dict().items())


def test_step_cap_and_best_student_is_kept() -> None:
    frame, label = _scene()
    student = _student()
    params = AlgorithmParams(threshold=0.999, max_updates=5)
    result = Distiller(student, params, background=2).train(frame, label)
    assert result.steps == 5 and len(result.step_seconds) == 5
    assert result.metric >= result.initial_metric
    assert _evaluate(student, frame, label) == pytest.approx(result.metric)


def test_stops_as_soon_as_the_metric_passes_threshold() -> None:
    frame, label = _scene()
    student = _student()
    params = AlgorithmParams(threshold=0.5, max_updates=50, learning_rate=0.01)
    result = Distiller(student, params, background=2).train(frame, label)
    assert result.metric > 0.5 and 0 < result.steps < 50
    assert _evaluate(student, frame, label) == pytest.approx(result.metric)


@pytest.mark.parametrize("mode", ["partial", "full"])
def test_only_the_modes_parameters_change(mode: str) -> None:
    frame, label = _scene()
    student = _student()
    before = {k: v.clone() for k, v in student.state_dict().items()}
    distiller = Distiller(student, AlgorithmParams(threshold=0.999, max_updates=3, mode=mode), background=2)
    distiller.train(frame, label)
    changed = {k for k, v in student.state_dict().items() if not torch.equal(before[k], v)}
    assert changed and changed <= set(student.trainable_keys(mode))  # type: ignore[arg-type]
    if mode == "partial":
        assert not any(k.startswith(("enc", "in_conv", "dec1")) for k in changed)


def test_partial_front_cache_matches_plain_forward() -> None:
    frame, _ = _scene()
    student = _student()
    x = normalise_frame(frame)
    with torch.no_grad():
        assert torch.allclose(student(x), student.forward_back(student.forward_front(x)))


def test_size_mismatch_is_an_error() -> None:
    frame, label = _scene()
    with pytest.raises(ValueError, match="differ"):
        Distiller(_student(), AlgorithmParams(), background=2).train(frame, label[:10])


class _ScriptedMetric:
    """Stands in for mIoU with a fixed sequence and records the trainable weights at each call.

    Call 0 scores the student before training, call i the student after step i; the script makes
    Algorithm 1's decisions hand-worked instead of depending on how training happens to go.
    """

    def __init__(self, student: StudentNet, script: list[float]) -> None:
        self.student, self.script = student, script
        self.weights_seen: list[dict[str, torch.Tensor]] = []

    def __call__(self, *_args: object) -> float:
        keys = self.student.trainable_keys("partial")
        state = self.student.state_dict()
        self.weights_seen.append({k: state[k].clone() for k in keys})
        return self.script[len(self.weights_seen) - 1]


def _run_scripted(monkeypatch: pytest.MonkeyPatch, script: list[float], **params: object):
    frame, label = _scene()
    student = _student()
    metric = _ScriptedMetric(student, script)
    monkeypatch.setattr("shadowtutor.algorithms.distill.miou", metric)
    result = Distiller(student, AlgorithmParams(**params), background=2).train(frame, label)
    return student, metric, result


def _holds(student: StudentNet, weights: dict[str, torch.Tensor]) -> bool:
    state = student.state_dict()
    return all(torch.equal(state[k], v) for k, v in weights.items())


def test_step_cap_restores_the_best_student_not_the_last(monkeypatch: pytest.MonkeyPatch) -> None:
    # before: 0.5; after steps 1..3: 0.6, 0.7 (best), 0.65 -> three steps, the student of step 2.
    student, metric, result = _run_scripted(monkeypatch, [0.5, 0.6, 0.7, 0.65], max_updates=3)
    assert result.steps == 3 and result.metric == 0.7 and result.initial_metric == 0.5
    assert len(metric.weights_seen) == 4
    assert not _holds(student, metric.weights_seen[3]) and _holds(student, metric.weights_seen[2])


def test_no_step_improves_on_the_start_so_the_start_comes_back(monkeypatch: pytest.MonkeyPatch) -> None:
    student, metric, result = _run_scripted(monkeypatch, [0.5, 0.4, 0.3], max_updates=2)
    assert result.steps == 2 and result.metric == 0.5
    assert _holds(student, metric.weights_seen[0])


def test_training_stops_at_the_first_metric_above_threshold(monkeypatch: pytest.MonkeyPatch) -> None:
    # 0.8 after step 1 is not above THRESHOLD 0.8, so training goes on; 0.85 after step 2 is: it stops.
    student, metric, result = _run_scripted(monkeypatch, [0.5, 0.8, 0.85, 0.99], threshold=0.8, max_updates=8)
    assert result.steps == 2 and result.metric == 0.85
    assert len(metric.weights_seen) == 3 and _holds(student, metric.weights_seen[2])


def test_a_first_metric_at_threshold_skips_training(monkeypatch: pytest.MonkeyPatch) -> None:
    student, metric, result = _run_scripted(monkeypatch, [0.8], threshold=0.8)
    assert result.skipped and result.metric == 0.8 and len(metric.weights_seen) == 1
    assert _holds(student, metric.weights_seen[0])


def _authors_algorithm1(
    student: StudentNet, params: AlgorithmParams, key_frames: list[tuple[np.ndarray, np.ndarray]], background: int
) -> tuple[list[int], int, StudentNet]:
    """A reference of the authors' loop (``dod_server.main``): the best student is a deep copy of the model
    *with* its Adam optimiser, or, for ``restore="weights"``, a copy of the weights only.
    Returns the steps per key frame, the number of rollbacks and the final student."""
    optimizer = torch.optim.Adam(student.set_trainable(params.mode), lr=params.learning_rate)
    steps, rollbacks = [], 0
    for frame, label in key_frames:
        x, target = normalise_frame(frame), torch.as_tensor(label).long()
        student.train()
        pred = student(x)
        acc = miou(pred.argmax(1)[0], target, student.num_classes)
        if acc >= params.threshold:
            steps.append(0)
            continue
        weight = torch.from_numpy(object_weight_map(label, background))
        best_acc, best = acc, copy.deepcopy((student, optimizer))
        for step in range(params.max_updates):  # noqa: B007 (read after the loop)
            loss = weighted_cross_entropy(pred, target, weight)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            pred = student(x)
            acc = miou(pred.argmax(1)[0], target, student.num_classes)
            if acc > params.threshold:
                break
            if acc > best_acc:
                best_acc, best = acc, copy.deepcopy((student, optimizer))
        else:
            if acc < best_acc:
                rollbacks += 1
                if params.restore == "weights+adam":
                    student, optimizer = best
                else:
                    student.load_state_dict(best[0].state_dict())
        steps.append(step + 1)
    return steps, rollbacks, student


@pytest.mark.parametrize("restore", ["weights", "weights+adam"])
def test_restore_matches_the_authors_deep_copy_of_model_and_adam(restore: str) -> None:
    """Steps per key frame and the final weights equal the reference's, bit for bit; rolling Adam
    back too ('weights+adam', the authors' deep copy) gives another run than the weights alone."""
    key_frames = [_scene(seed) for seed in range(6)]
    params = AlgorithmParams(threshold=0.99, max_updates=4, learning_rate=0.05, mode="full", restore=restore)
    distiller = Distiller(_student(), params, background=2, fuse_tail=False)  # the tail as the authors compute it
    ours = [distiller.train(frame, label).steps for frame, label in key_frames]
    reference, rollbacks, expected = _authors_algorithm1(_student(), params, key_frames, background=2)
    assert rollbacks > 0  # the case the two restores differ in happens
    assert ours == reference
    for key, value in expected.state_dict().items():
        assert torch.equal(distiller.student.state_dict()[key], value), key
    other = params.replace(restore="weights" if restore == "weights+adam" else "weights+adam")
    _, _, other_student = _authors_algorithm1(_student(), other, key_frames, background=2)
    assert any(not torch.equal(v, other_student.state_dict()[k]) for k, v in expected.state_dict().items())


@pytest.mark.parametrize("mode", ["partial", "full"])
def test_training_through_the_fused_tail_follows_the_tail_as_written(mode: str) -> None:
    """The same function rounded differently: the same steps and metrics, and students that label alike.

    (Not the same weights: parameters the output does not depend on, such as biases before a
    normalisation, get gradients of float noise, which Adam scales up to full-size steps either way.)"""
    key_frames = [_scene(seed) for seed in range(3)]  # 64x96: the tail fuses
    params = AlgorithmParams(threshold=0.99, max_updates=3, learning_rate=0.01, mode=mode)
    fused, plain = (Distiller(_student(), params, background=2, fuse_tail=fuse) for fuse in (True, False))
    for frame, label in key_frames:
        ours, theirs = fused.train(frame, label), plain.train(frame, label)
        assert ours.steps == theirs.steps and ours.metric == pytest.approx(theirs.metric, abs=1e-3)
    with torch.no_grad():
        for frame, _ in key_frames:
            x = normalise_frame(frame)
            expected = plain.student(x)
            torch.testing.assert_close(fused.student(x), expected, rtol=0, atol=1e-3 * float(expected.abs().max()))


def test_the_fused_back_has_the_values_and_gradients_of_the_back_as_written() -> None:
    from shadowtutor.models.fast_student import fused_back

    student = _student()
    torch.nn.init.normal_(student.out_conv1.bias)  # the border kernels leave out padded taps' bias
    front = student.forward_front(normalise_frame(_scene()[0])).detached()
    gradients = []
    for back in (fused_back, type(student).forward_back):
        student.zero_grad()
        logits = back(student, front)
        (logits * torch.linspace(-1, 1, logits.numel()).view_as(logits)).sum().backward()
        gradients.append({name: p.grad.clone() for name, p in student.named_parameters() if p.grad is not None})
        gradients[-1]["logits"] = logits.detach()
    assert set(gradients[0]) == set(gradients[1]) and any(k.startswith("out_conv1") for k in gradients[0])
    scale = max(float(value.abs().max()) for value in gradients[1].values())
    for name, value in gradients[1].items():
        torch.testing.assert_close(gradients[0][name], value, rtol=1e-4, atol=1e-5 * scale, msg=name)

