"""The student on the edge: inference and weight installation through a backend, nothing about versions.

Backends (``--backend``): ``cuda`` runs :class:`StudentNet` on the GPU (a Jetson); ``reference``,
``torch`` (the faster rewritten graph) and ``onnx`` (the same graph in ONNX Runtime) run on
the CPU (see :mod:`shadowtutor.models.inference`); ``auto`` picks ``cuda`` when a GPU is
available, else ``torch``. All give the same labels up to float rounding.

With change-based inference (``--change-based``) a CPU backend is wrapped by the change-based
student (:mod:`shadowtutor.acceleration.change_based`); ``auto`` then picks ``onnx`` when it is
installed (the fastest full-frame fallback), else ``torch``.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping

import numpy as np
import torch

from shadowtutor.acceleration.change_based.backend import ChangeBasedBackend, ChangeBasedOptions
from shadowtutor.acceleration.change_based.runner import ChangeStats
from shadowtutor.models.checkpoint import student_from_state_dict
from shadowtutor.models.inference import (
    BACKEND_KINDS,
    InferenceBackend,
    ReferenceBackend,
    build_inference_backend,
    check_frame,
    onnx_available,
)
from shadowtutor.models.student import StudentNet, normalise_frame

BACKENDS = ("auto", "cuda", *BACKEND_KINDS)


def resolve_backend(name: str, change_based: bool = False) -> str:
    """The concrete backend for ``name``; an error when this machine cannot run it."""
    if name not in BACKENDS:
        raise ValueError(f"unknown student backend {name!r}: choose one of {', '.join(BACKENDS)}")
    if change_based:
        if name in ("cuda", "reference"):
            raise ValueError(f"change-based inference runs with the torch or onnx backend, not {name}")
        if name == "auto":
            return "onnx" if onnx_available() else "torch"
    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "torch"
    if name == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("student backend 'cuda': PyTorch sees no CUDA device here")
    if name == "onnx" and not onnx_available():
        raise RuntimeError("student backend 'onnx' needs onnx and onnxruntime (pip install 'shadowtutor[onnx]')")
    return name


class CudaBackend(ReferenceBackend):
    """:class:`StudentNet` as written, on the GPU (updates load as in the reference backend)."""

    kind = "cuda"

    def __init__(self, student: StudentNet) -> None:
        self.student = copy.deepcopy(student).cuda().eval()

    def infer(self, frame_bgr: np.ndarray) -> np.ndarray:
        with torch.inference_mode():
            logits = self.student(normalise_frame(check_frame(frame_bgr), "cuda"))
            return logits[0].argmax(0).to(torch.uint8).cpu().numpy()


class StudentRuntime:
    """The edge's student; empty until :meth:`load` gets full weights (the server's WELCOME)."""

    def __init__(self, backend: str = "auto", change_based: ChangeBasedOptions | None = None) -> None:
        self.backend_kind = resolve_backend(backend, change_based is not None)
        self.change_based = change_based
        self.backend: InferenceBackend | None = None
        self.class_names: tuple[str, ...] = ()

    @property
    def loaded(self) -> bool:
        return self.backend is not None

    def load(self, state: Mapping[str, torch.Tensor], class_names: tuple[str, ...]) -> None:
        """Replace the model by one built from a complete state dict (a checkpoint error if it is not)."""
        student = student_from_state_dict(state, class_names)
        self.backend = CudaBackend(student) if self.backend_kind == "cuda" else build_inference_backend(
            self.backend_kind, student, change_based=self.change_based
        )
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
