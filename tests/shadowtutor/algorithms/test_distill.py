from __future__ import annotations

import numpy as np
import pytest
import torch

from shadowtutor.algorithms.distill import Distiller
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
