"""A labeller as the client loop's student: labels at the frame's size, the student at the student size."""

from __future__ import annotations

import numpy as np
import torch

from shadowtutor.acceleration.change_based.backend import ChangeBasedOptions
from shadowtutor.acceleration.labellers.edge_student import edge_student
from shadowtutor.acceleration.labellers.registry import LabellerSpec
from shadowtutor.classes import LVS_CLASSES
from shadowtutor.models.inference import build_inference_backend
from shadowtutor.models.student import StudentNet


def test_the_edge_student_labels_as_the_backend_at_the_student_size_and_follows_updates() -> None:
    torch.manual_seed(0)
    student = StudentNet(len(LVS_CLASSES)).eval()
    frame = np.random.default_rng(0).integers(0, 256, (96, 128, 3), dtype=np.uint8)
    scaled = build_inference_backend("torch", student, student_size=(64, 48))
    exact = ChangeBasedOptions(scale=0.0)  # thresholds 0: the labels of full-frame inference
    for spec in (LabellerSpec(backend="torch"), LabellerSpec(backend="torch", change_based=exact)):
        edge = edge_student(spec, student, (64, 48))
        labels = edge.infer(frame)
        assert labels.shape == (96, 128) and np.array_equal(labels, scaled.infer(frame))
        edge.apply({"out_conv3.bias": torch.arange(9, dtype=torch.float32) * 100})
        assert (edge.infer(frame) == 8).all()
