"""Device choice for the PyTorch-based teachers."""

from __future__ import annotations

from shadowtutor.teachers.base import TeacherError


def resolve_torch_device(device: str) -> str:
    """``"auto"`` -> ``"cuda"`` when CUDA is usable, else ``"cpu"``; ``"cpu"``/``"cuda[:N]"`` are
    checked."""
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cpu":
        return device
    if device == "cuda" or device.startswith("cuda:"):
        if not torch.cuda.is_available():
            raise TeacherError(
                f"device {device!r} requested but CUDA is not available (use 'cpu' or 'auto')"
            )
        index = device.partition(":")[2]
        if index and (not index.isdigit() or int(index) >= torch.cuda.device_count()):
            raise TeacherError(f"no CUDA device {device!r}: {torch.cuda.device_count()} present")
        return device
    raise TeacherError(f"unknown device {device!r}: use 'auto', 'cpu', 'cuda' or 'cuda:N'")
