"""Change-based inference (static cameras) as a decorator of the plain student.

Frames that change little are recomputed only where they changed
(:mod:`shadowtutor.acceleration.change_based`); the rest go to the wrapped student's backend.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import torch

from shadowtutor.acceleration.change_based.backend import ChangeBasedBackend, ChangeBasedOptions
from shadowtutor.acceleration.labellers.base import LabellerStats, OneFrameAtATime
from shadowtutor.acceleration.labellers.student import StudentLabeller
from shadowtutor.models.checkpoint import student_from_state_dict
from shadowtutor.models.inference import check_frame


class ChangeBasedLabeller(OneFrameAtATime):
    """``inner`` (a student on ``torch`` or ``onnx``) takes the frames that changed too much;
    weights go to both."""

    def __init__(self, inner: StudentLabeller, options: ChangeBasedOptions) -> None:
        self.inner = inner
        self.options = options
        # a bad threshold file or scale fails now
        options.thresholds()
        self.backend: ChangeBasedBackend | None = None

    @property
    def kind(self) -> str:
        return f"{self.inner.kind}+change-based"

    def load(self, state: Mapping[str, torch.Tensor], class_names: tuple[str, ...]) -> None:
        self.inner.load(state, class_names)
        self.backend = ChangeBasedBackend(
            self.inner.require(), student_from_state_dict(state, class_names), self.options
        )

    def apply(self, update: Mapping[str, torch.Tensor]) -> None:
        # the change-based student and the wrapped backend
        self._require().load_weights(update)

    def label(self, frame: np.ndarray) -> np.ndarray:
        return self._require().infer(check_frame(frame))

    def new_scene(self) -> None:
        if self.backend is not None:
            # the next frame is evaluated in full: no cache carries over
            self.backend.runner.size = None

    def stats(self) -> LabellerStats:
        return LabellerStats(
            kind=self.kind, change=self.backend.stats if self.backend is not None else None
        )

    def _require(self) -> ChangeBasedBackend:
        if self.backend is None:
            raise RuntimeError("the student has no weights yet; the server's WELCOME installs them")
        return self.backend
