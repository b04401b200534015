"""The plain student: every frame whole through one inference backend
(:mod:`shadowtutor.models.inference`)."""

from __future__ import annotations

import logging
from collections.abc import Mapping

import numpy as np
import torch

from shadowtutor.acceleration.labellers.base import LabellerStats, OneFrameAtATime
from shadowtutor.models.backends import BackendUnavailableError, resolve_backend
from shadowtutor.models.checkpoint import student_from_state_dict
from shadowtutor.models.inference import InferenceBackend, build_inference_backend, check_frame

log = logging.getLogger(__name__)


class StudentLabeller(OneFrameAtATime):
    """The student on whole frames, on ``backend`` (``auto``: the fastest this machine runs).

    A named backend this machine lacks fails at construction. At :meth:`load`, a backend that fails
    to start hands over to the next candidate of ``auto`` for good (logged); a named backend's
    failure is an error. ``change_based`` narrows ``auto`` to the backends change-based inference
    falls back to.
    """

    def __init__(
        self, backend: str = "auto", *, change_based: bool = False, threads: int | None = None
    ) -> None:
        self.candidates = resolve_backend(backend, change_based=change_based)
        self.threads = threads
        self.backend: InferenceBackend | None = None

    @property
    def kind(self) -> str:
        """The backend in use (before the first load: the one that will be tried first)."""
        return self.backend.kind if self.backend is not None else self.candidates[0]

    def load(self, state: Mapping[str, torch.Tensor], class_names: tuple[str, ...]) -> None:
        student = student_from_state_dict(state, class_names)
        while True:
            kind = self.candidates[0]
            try:
                self.backend = build_inference_backend(kind, student, self.threads)
                break
            except BackendUnavailableError as exc:
                if len(self.candidates) == 1:
                    raise
                self.candidates.pop(0)
                log.warning("%s; falling back to student backend %r", exc, self.candidates[0])

    def apply(self, update: Mapping[str, torch.Tensor]) -> None:
        self.require().load_weights(update)

    def label(self, frame: np.ndarray) -> np.ndarray:
        return self.require().infer(check_frame(frame))

    def stats(self) -> LabellerStats:
        return LabellerStats(kind=self.kind)

    def require(self) -> InferenceBackend:
        """The backend, or a RuntimeError saying that no weights were loaded yet."""
        if self.backend is None:
            raise RuntimeError("the student has no weights yet; the server's WELCOME installs them")
        return self.backend
