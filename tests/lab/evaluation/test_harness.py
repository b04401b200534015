from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from shadowtutor.algorithms.params import AlgorithmParams
from shadowtutor.classes import LVS_CLASSES
from shadowtutor.models.student import StudentNet
from shadowtutor.scene_store import Scene
from shadowtutor.teachers import build_teacher
from shadowtutor_lab.evaluation.harness import SETTINGS, WILD, SceneEvaluation, evaluate_scene


@pytest.fixture(scope="module")
def evaluation(tiny_scene: Path) -> SceneEvaluation:
    torch.manual_seed(0)
    scene = Scene.open(tiny_scene)
    seen: list[int] = []
    result = evaluate_scene(
        "tiny", scene.frames(), build_teacher("labels", labels_dir=tiny_scene), StudentNet(9), LVS_CLASSES,
        AlgorithmParams(max_updates=2), backend="torch", on_frame=lambda i, running: seen.append(i),
    )
    assert seen == list(range(40))
    return result


def test_every_setting_is_traced_on_every_frame(evaluation: SceneEvaluation) -> None:
    assert (evaluation.frames, evaluation.width, evaluation.height) == (40, 96, 64)
    assert set(evaluation.traces) == {WILD, *(s.key for s in SETTINGS)}
    assert evaluation.traces[WILD].key_frames == [] and evaluation.traces[WILD].records == []
    for setting in SETTINGS:
        trace = evaluation.traces[setting.key]
        assert len(trace.miou) == len(trace.strides) == 40
        assert all(0.0 <= m <= 1.0 for m in trace.miou)
        assert all(8 <= s <= 64 for s in trace.strides)
        assert trace.key_frames[0] == 0 and len(trace.key_frames) == len(trace.records)
        assert all(b - a >= 8 for a, b in zip(trace.key_frames, trace.key_frames[1:], strict=False))
        assert all(0 <= r.steps <= 2 for r in trace.records)


def test_distillation_beats_the_untrained_student(evaluation: SceneEvaluation) -> None:
    wild = np.mean(evaluation.traces[WILD].miou)
    for key in ("p1", "p8", "f1"):
        assert np.mean(evaluation.traces[key].miou) > wild


def test_p8_runs_on_old_weights_until_min_stride(evaluation: SceneEvaluation) -> None:
    # Until the first update lands all settings label frames with the same pre-trained student.
    p1, p8 = evaluation.traces["p1"].miou, evaluation.traces["p8"].miou
    wild = evaluation.traces[WILD].miou
    assert p8[:8] == pytest.approx(wild[:8])
    assert p1[0] == pytest.approx(wild[0])


def test_evaluation_round_trips_through_json(evaluation: SceneEvaluation) -> None:
    again = SceneEvaluation.from_dict(json.loads(json.dumps(evaluation.to_dict())))
    assert again == evaluation


def test_the_teacher_must_speak_the_students_classes(tiny_scene: Path) -> None:
    teacher = build_teacher("labels", labels_dir=tiny_scene)
    with pytest.raises(ValueError, match="classes"):
        evaluate_scene("x", [], teacher, StudentNet(3), ("a", "b", "background"), AlgorithmParams())


def test_frames_must_keep_one_size(tiny_scene: Path) -> None:
    frames = [np.zeros((64, 96, 3), np.uint8), np.zeros((32, 48, 3), np.uint8)]
    with pytest.raises(ValueError, match="frame 1"):
        evaluate_scene("x", frames, build_teacher("labels", labels_dir=tiny_scene), StudentNet(9), LVS_CLASSES,
                       AlgorithmParams(max_updates=1))


def test_on_labels_gets_the_label_maps_the_traces_scored(tiny_scene: Path) -> None:
    from shadowtutor.algorithms.metrics import miou

    torch.manual_seed(0)
    scene = Scene.open(tiny_scene)
    seen: dict[int, dict[str, np.ndarray]] = {}
    result = evaluate_scene(
        "tiny", list(scene.frames())[:10], build_teacher("labels", labels_dir=tiny_scene), StudentNet(9),
        LVS_CLASSES, AlgorithmParams(max_updates=1), backend="torch", settings=(WILD, "p8"),
        on_labels=lambda i, labels: seen.setdefault(i, {k: v.copy() for k, v in labels.items()}),
    )
    assert sorted(seen) == list(range(10))
    for index, labels in seen.items():
        assert set(labels) == {"teacher", WILD, "p8"}
        for key in (WILD, "p8"):
            assert miou(labels[key], labels["teacher"], len(LVS_CLASSES)) == pytest.approx(
                result.traces[key].miou[index])
