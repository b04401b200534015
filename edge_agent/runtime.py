"""The student on the edge: PyTorch inference and weight installation, nothing about versions or the network."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import torch

from shadowtutor.models.checkpoint import student_from_state_dict
from shadowtutor.models.student import StudentNet, normalise_frame


def resolve_device(name: str) -> torch.device:
    """``auto`` picks CUDA when it is available (a Jetson), else the CPU."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


class TorchStudentRuntime:
    """A :class:`StudentNet` on one device; starts empty until :meth:`load` gets full weights."""

    def __init__(self, device: str = "auto") -> None:
        self.device = resolve_device(device)
        self.model: StudentNet | None = None
        self.class_names: tuple[str, ...] = ()

    @property
    def loaded(self) -> bool:
        return self.model is not None

    def load(self, state: Mapping[str, torch.Tensor], class_names: tuple[str, ...]) -> None:
        """Replace the model by one built from a complete state dict (a checkpoint error if it is not)."""
        model = student_from_state_dict(state, class_names)
        self.model = model.to(self.device).eval()
        self.class_names = tuple(class_names)

    def update(self, tensors: Mapping[str, torch.Tensor]) -> None:
        """Overwrite some of the model's tensors (a partial update); unknown names are an error."""
        model = self._require_model()
        known = model.state_dict()
        unknown = [name for name in tensors if name not in known]
        if unknown:
            raise ValueError(f"update names tensors the student does not have: {unknown[:5]}")
        model.load_state_dict(dict(tensors), strict=False)

    def infer(self, frame: np.ndarray) -> np.ndarray:
        """Per-pixel class labels ``(H, W)`` uint8 for one BGR uint8 frame."""
        model = self._require_model()
        with torch.inference_mode():
            logits = model(normalise_frame(frame, self.device))
            return logits[0].argmax(0).to(torch.uint8).cpu().numpy()

    def _require_model(self) -> StudentNet:
        if self.model is None:
            raise RuntimeError("the student has no weights yet; the server's WELCOME installs them")
        return self.model
