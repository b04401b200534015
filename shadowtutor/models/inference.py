"""Student inference backends for the edge: ``build_inference_backend(kind, student)``.

Every backend holds its own copy of the student and offers ``infer(frame_bgr) -> labels``
and ``load_weights(update)`` (a partial ``state_dict``, as the server sends it); ``apply``
is the same as ``load_weights``, so a backend is a
:class:`~shadowtutor.algorithms.client_loop.StudentRuntime` for ``{key: tensor}`` payloads.

* ``reference``: :class:`StudentNet` as written, plain PyTorch float32 (the baseline);
* ``torch``: :class:`~shadowtutor.models.fast_student.FastStudent` in PyTorch;
* ``onnx``: the same graph in ONNX Runtime (needs the ``onnx`` extra); ``onnx-cuda`` and
  ``onnx-trt`` run it on a GPU (:mod:`shadowtutor.models.backends`).

All give the same labels up to float rounding (``shadowtutor bench student`` measures
the agreement). The torch backends use ``torch.get_num_threads()`` threads; ``threads``
sets ONNX Runtime's.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Protocol

import numpy as np
import torch

from shadowtutor.models.backends import ONNX_PROVIDERS, STUDENT_BACKENDS, onnxruntime_providers
from shadowtutor.models.fast_student import FastStudent, channel_argmax, check_update
from shadowtutor.models.frames import check_frame
from shadowtutor.models.scale import Size, check_size, infer_scaled
from shadowtutor.models.student import StudentNet, normalise_frame

BUILDABLE_BACKENDS = tuple(kind for kind in STUDENT_BACKENDS if kind != "auto")


class InferenceBackend(Protocol):
    kind: str

    def infer(self, frame_bgr: np.ndarray) -> np.ndarray:
        """Labels ``uint8 (H, W)`` of one BGR ``uint8 (H, W, 3)`` frame."""

    def load_weights(self, update: Mapping[str, torch.Tensor]) -> None:
        """Install a (partial) student ``state_dict``."""

    def apply(self, payload: Mapping[str, torch.Tensor]) -> None:
        """Same as :meth:`load_weights` (the client loop's name for it)."""


class ReferenceBackend:
    """The straightforward implementation: ``StudentNet(normalise_frame(frame)).argmax(1)``."""

    kind = "reference"

    def __init__(self, student: StudentNet) -> None:
        self.student = copy.deepcopy(student).cpu().eval()

    def infer(self, frame_bgr: np.ndarray) -> np.ndarray:
        with torch.inference_mode():
            labels = self.student(normalise_frame(check_frame(frame_bgr))).argmax(1)[0]
        return labels.to(torch.uint8 if self.student.num_classes <= 256 else torch.int64).numpy()

    def load_weights(self, update: Mapping[str, torch.Tensor]) -> None:
        check_update(self.student, update)
        self.student.load_state_dict(dict(update), strict=False)

    apply = load_weights


class TorchBackend:
    """:class:`FastStudent` in PyTorch, with a per-class argmax pass (``fuse_tail`` False: the tail
    unfused at every frame size, for comparison)."""

    kind = "torch"

    def __init__(self, student: StudentNet, fuse_tail: bool = True) -> None:
        self.fast = FastStudent(copy.deepcopy(student).cpu().eval(), fuse_tail=fuse_tail)

    def infer(self, frame_bgr: np.ndarray) -> np.ndarray:
        with torch.inference_mode():
            return channel_argmax(
                self.fast.logits(torch.from_numpy(check_frame(frame_bgr)))
            ).numpy()

    def load_weights(self, update: Mapping[str, torch.Tensor]) -> None:
        self.fast.load_weights(update)

    apply = load_weights


class CudaBackend(ReferenceBackend):
    """:class:`StudentNet` as written, on the GPU (updates load as in the reference backend)."""

    kind = "cuda"

    def __init__(self, student: StudentNet) -> None:
        self.student = copy.deepcopy(student).cuda().eval()

    def infer(self, frame_bgr: np.ndarray) -> np.ndarray:
        with torch.inference_mode():
            logits = self.student(normalise_frame(check_frame(frame_bgr), "cuda"))
            return logits[0].argmax(0).to(torch.uint8).cpu().numpy()


class ScaledBackend:
    """A backend whose student runs on frames resized to ``size`` (:mod:`shadowtutor.models.scale`);
    its labels come back upsampled (nearest) to the frame's size."""

    def __init__(self, inner: InferenceBackend, size: Size) -> None:
        self.inner = inner
        self.size = check_size(size)
        self.kind = inner.kind

    def infer(self, frame_bgr: np.ndarray) -> np.ndarray:
        return infer_scaled(self.inner.infer, check_frame(frame_bgr), self.size)

    def load_weights(self, update: Mapping[str, torch.Tensor]) -> None:
        self.inner.load_weights(update)

    apply = load_weights


def onnx_available() -> bool:
    return onnxruntime_providers() is not None


def build_inference_backend(
    kind: str,
    student: StudentNet,
    threads: int | None = None,
    student_size: Size | None = None,
) -> InferenceBackend:
    """A backend of ``kind`` (a :data:`~shadowtutor.models.backends.STUDENT_BACKENDS` name but
    ``auto``) holding a copy of ``student``.

    With ``student_size`` ``(W, H)`` the student runs on frames resized to it
    (:class:`ScaledBackend`). Accelerations (change-based inference, the flow path, the cluster) are
    built around backends by the edge's labeller registry
    (:mod:`shadowtutor.acceleration.labellers.registry`).
    """
    backend = _build_backend(kind, student, threads)
    return backend if student_size is None else ScaledBackend(backend, student_size)


def _build_backend(kind: str, student: StudentNet, threads: int | None) -> InferenceBackend:
    if kind == "reference":
        backend: InferenceBackend = ReferenceBackend(student)
    elif kind == "torch":
        backend = TorchBackend(student)
    elif kind == "cuda":
        backend = CudaBackend(student)
    elif kind in ONNX_PROVIDERS:
        from shadowtutor.models.onnx_student import OnnxBackend

        backend = OnnxBackend(student, threads=threads, kind=kind)
    else:
        raise ValueError(
            f"unknown inference backend {kind!r}: choose one of {', '.join(BUILDABLE_BACKENDS)}"
        )
    return backend
