"""The student's input scale: exact shapes, labels back at the frame's size, server and edge on one input."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from shadowtutor.algorithms.distill import Distiller
from shadowtutor.algorithms.metrics import miou
from shadowtutor.algorithms.params import AlgorithmParams
from shadowtutor.models.inference import ReferenceBackend, ScaledBackend, build_inference_backend
from shadowtutor.models.scale import (
    boxes_to_student,
    frame_to_student,
    labels_to_frame,
    labels_to_student,
    parse_size,
    setting,
)
from shadowtutor.models.student import StudentNet
from tests.support.scene import CLASS_NAMES, make_frames


def test_sizes_parse_and_bad_ones_say_what_is_wrong() -> None:
    assert parse_size("320x180") == (320, 180) and parse_size(" 64X36 ") == (64, 36)
    assert parse_size("native") is None and parse_size("") is None and setting(None) is None
    assert setting((32, 18)) == (32, 18) and setting("32x18") == (32, 18)
    with pytest.raises(ValueError, match="WIDTHxHEIGHT"):
        parse_size("320")
    with pytest.raises(ValueError, match="positive"):
        setting((0, 18))


def test_frames_go_down_by_area_labels_by_nearest_and_come_back_at_the_frame_size() -> None:
    frame = np.zeros((48, 64, 3), np.uint8)
    frame[:, 32:] = 200
    small = frame_to_student(frame, (32, 24))
    assert small.shape == (24, 32, 3) and small[0, 15].tolist() == [0, 0, 0] and small[0, 16].tolist() == [200] * 3
    assert frame_to_student(frame, None) is frame and frame_to_student(frame, (64, 48)) is frame
    labels = np.arange(12, dtype=np.uint8).reshape(3, 4).repeat(16, 0).repeat(16, 1)  # 48x64, 16-pixel cells
    down = labels_to_student(labels, (32, 24))
    assert down.shape == (24, 32) and set(np.unique(down)) == set(range(12))  # nearest: no mixed values
    up = labels_to_frame(down, frame.shape)
    assert up.shape == (48, 64) and np.array_equal(up, labels)
    boxes = boxes_to_student(np.array([[8.0, 4.0, 64.0, 48.0]]), frame.shape, (32, 24))
    np.testing.assert_allclose(boxes, [[4.0, 2.0, 32.0, 24.0]])


@pytest.mark.parametrize("kind", ["reference", "torch"])
def test_a_scaled_backend_labels_the_resized_frame_and_upsamples_to_the_frame(kind: str) -> None:
    torch.manual_seed(0)
    student = StudentNet(len(CLASS_NAMES))
    (frame, *_), _ = make_frames(1, width=128, height=96)
    scaled = build_inference_backend(kind, student, student_size=(64, 48))
    assert isinstance(scaled, ScaledBackend) and scaled.kind == kind
    labels = scaled.infer(frame)
    assert labels.shape == (96, 128) and labels.dtype == np.uint8
    at_scale = build_inference_backend(kind, student).infer(frame_to_student(frame, (64, 48)))
    assert np.array_equal(labels, labels_to_frame(at_scale, frame.shape))
    with pytest.raises(ValueError, match="BGR uint8"):
        scaled.infer(frame[..., 0])


def test_the_servers_copy_trains_on_exactly_what_the_edges_student_sees() -> None:
    torch.manual_seed(0)
    student = StudentNet(len(CLASS_NAMES))
    (frame, *_), (label, *_) = make_frames(1, width=128, height=96)
    size = (64, 48)
    edge = ReferenceBackend(student)
    distiller = Distiller(StudentNet(len(CLASS_NAMES)), AlgorithmParams(max_updates=1, threshold=0.99), 2,
                          student_size=size)
    distiller.student.load_state_dict(student.state_dict())
    result = distiller.train(frame, label)
    # the metric before distillation is the edge student's labels of the resized frame against the
    # teacher's labels downsampled (nearest) to the same size
    edge_at_scale = edge.infer(frame_to_student(frame, size))
    assert result.initial_metric == pytest.approx(miou(edge_at_scale, labels_to_student(label, size), len(CLASS_NAMES)))
    assert result.steps == 1
    edge.load_weights({k: v for k, v in distiller.student.state_dict().items() if k in distiller.trainable_keys})
    assert ScaledBackend(edge, size).infer(frame).shape == label.shape
    with pytest.raises(ValueError, match="positive"):
        Distiller(StudentNet(len(CLASS_NAMES)), AlgorithmParams(), 2, student_size=(0, 48))
