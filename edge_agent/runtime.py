"""The student on the edge: inference and weight installation through a backend, nothing about versions.

Backends (``--backend``, :mod:`shadowtutor.models.backends`): ``onnx-trt`` and ``onnx-cuda`` run
the student's ONNX graph on the GPU (a Jetson) through ONNX Runtime's TensorRT or CUDA provider,
``cuda`` runs :class:`StudentNet` on the GPU in PyTorch; ``reference``, ``torch`` (the faster
rewritten graph) and ``onnx`` (the same graph in ONNX Runtime) run on the CPU (see
:mod:`shadowtutor.models.inference`); ``auto`` picks the fastest this machine runs, and falls back
to the next when one fails to start. All give the same labels up to float rounding.

With change-based inference (``--change-based``) a CPU backend is wrapped by the change-based
student (:mod:`shadowtutor.acceleration.change_based`); ``auto`` then picks ``onnx`` when it is
installed (the fastest full-frame fallback), else ``torch``.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

import numpy as np
import torch

from shadowtutor.acceleration.change_based.backend import ChangeBasedBackend, ChangeBasedOptions
from shadowtutor.acceleration.change_based.runner import ChangeStats
from shadowtutor.models.backends import STUDENT_BACKENDS, BackendUnavailableError, resolve_backend
from shadowtutor.models.checkpoint import student_from_state_dict
from shadowtutor.models.inference import InferenceBackend, build_inference_backend

BACKENDS = STUDENT_BACKENDS
log = logging.getLogger(__name__)


class StudentRuntime:
    """The edge's student; empty until :meth:`load` gets full weights (the server's WELCOME)."""

    def __init__(self, backend: str = "auto", change_based: ChangeBasedOptions | None = None) -> None:
        # a named backend this machine lacks fails here, at start
        self.candidates = resolve_backend(backend, change_based=change_based is not None)
        self.change_based = change_based
        self.backend: InferenceBackend | None = None
        self.class_names: tuple[str, ...] = ()

    @property
    def backend_kind(self) -> str:
        """The backend in use (before the first load: the one that will be tried first)."""
        return self.backend.kind if self.backend is not None else self.candidates[0]

    @property
    def loaded(self) -> bool:
        return self.backend is not None

    def load(self, state: Mapping[str, torch.Tensor], class_names: tuple[str, ...]) -> None:
        """Replace the model by one built from a complete state dict (a checkpoint error if it is not).

        A backend that fails to start (a GPU provider that ONNX Runtime could not load) hands over
        to the next candidate of ``auto``, for good; a named backend's failure is an error.
        """
        student = student_from_state_dict(state, class_names)
        while True:
            kind = self.candidates[0]
            try:
                self.backend = build_inference_backend(kind, student, change_based=self.change_based)
                break
            except BackendUnavailableError as exc:
                if len(self.candidates) == 1:
                    raise
                self.candidates.pop(0)
                log.warning("%s; falling back to student backend %r", exc, self.candidates[0])
        self.class_names = tuple(class_names)

    def update(self, tensors: Mapping[str, torch.Tensor]) -> None:
        """Overwrite some of the model's tensors (a partial update); unknown names or shapes are an error."""
        self._require_backend().load_weights(tensors)

    def infer(self, frame: np.ndarray) -> np.ndarray:
        """Per-pixel class labels ``(H, W)`` uint8 for one BGR uint8 frame."""
        return self._require_backend().infer(frame)

    @property
    def change_stats(self) -> ChangeStats | None:
        """What the last frame did, when the student runs change-based."""
        return self.backend.stats if isinstance(self.backend, ChangeBasedBackend) else None

    def _require_backend(self) -> InferenceBackend:
        if self.backend is None:
            raise RuntimeError("the student has no weights yet; the server's WELCOME installs them")
        return self.backend
