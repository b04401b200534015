"""Numeric precision of a PyTorch teacher's forward pass.

``fp32``: IEEE float32 everywhere (TF32 off for cuDNN convolutions and CUDA matmuls, which
PyTorch would otherwise allow for convolutions). ``tf32``: TF32 tensor cores for float32
convolutions and matmuls on CUDA. ``bf16``: the backbone under bfloat16 autocast, the rest as
``tf32``. On a CPU ``fp32`` and ``tf32`` are the same (TF32 is a CUDA feature) and ``bf16``
autocasts on the CPU.

PyTorch keeps the TF32 switches per process, not per thread: :func:`float32_precision` sets
them for the duration of its block and restores them after, so work launched from other threads
in that time runs under the same switches.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Literal

from shadowtutor.teachers.base import TeacherError

if TYPE_CHECKING:
    import torch

Precision = Literal["fp32", "tf32", "bf16"]
PRECISIONS: tuple[Precision, ...] = ("fp32", "tf32", "bf16")


def check_precision(precision: str) -> Precision:
    if precision not in PRECISIONS:
        raise TeacherError(f"precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
    return precision


@contextmanager
def float32_precision(device: torch.device | str, precision: Precision) -> Iterator[None]:
    """Within the block, float32 convolutions and matmuls on a CUDA ``device`` use TF32 unless
    ``precision`` is ``fp32``; the previous switches come back afterwards. Nothing on a CPU."""
    import torch

    if torch.device(device).type != "cuda":
        yield
        return
    cudnn: Any = torch.backends.cudnn  # a CudnnModule at run time: its conv and rnn switches are not in the stubs
    backends = (cudnn.conv, cudnn.rnn, torch.backends.cuda.matmul)
    before = [backend.fp32_precision for backend in backends]
    wanted = "ieee" if precision == "fp32" else "tf32"
    for backend in backends:
        backend.fp32_precision = wanted
    try:
        yield
    finally:
        for backend, value in zip(backends, before, strict=True):
            backend.fp32_precision = value


def backbone_autocast(device: torch.device | str, precision: Precision) -> torch.autocast:
    """bfloat16 autocast on ``device``'s type when ``precision`` is ``bf16``, else a disabled one."""
    import torch

    return torch.autocast(torch.device(device).type, dtype=torch.bfloat16, enabled=precision == "bf16")
