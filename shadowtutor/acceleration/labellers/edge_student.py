"""A labeller as the client loop's student
(:class:`~shadowtutor.algorithms.client_loop.StudentRuntime`)."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import torch

from shadowtutor.acceleration.labellers.base import FrameLabeller, holding
from shadowtutor.acceleration.labellers.registry import LabellerSpec, build_labeller
from shadowtutor.models.inference import check_frame
from shadowtutor.models.scale import Size, check_size, infer_scaled
from shadowtutor.models.student import StudentNet


class EdgeStudent:
    """``infer`` labels a frame with ``labeller`` (run on the frame resized to ``student_size`` when
    given, labels at the frame's size); ``apply`` installs a weight update."""

    def __init__(self, labeller: FrameLabeller, student_size: Size | None = None) -> None:
        self.labeller = labeller
        self.student_size = check_size(student_size)

    def infer(self, frame: np.ndarray) -> np.ndarray:
        if self.student_size is None:
            return self.labeller.label(frame)
        return infer_scaled(self.labeller.label, check_frame(frame), self.student_size)

    def apply(self, update: Mapping[str, torch.Tensor]) -> None:
        self.labeller.apply(update)


def edge_student(
    spec: LabellerSpec, student: StudentNet, student_size: Size | None = None
) -> EdgeStudent:
    """The labeller ``spec`` describes, holding ``student``'s weights, as the client loop's
    student."""
    return EdgeStudent(holding(build_labeller(spec), student), student_size)
