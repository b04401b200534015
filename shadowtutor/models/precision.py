"""Numeric precision of a PyTorch model's work on a device: a teacher's forward pass, a student's
training.

``fp32``: IEEE float32 everywhere (TF32 off for cuDNN convolutions and CUDA matmuls, which PyTorch
would otherwise allow for convolutions). ``tf32``: TF32 tensor cores for float32 convolutions and
matmuls on CUDA. ``bf16``: the caller's chosen part of the model under bfloat16 autocast
(:func:`bf16_autocast`), the rest as ``tf32`` for a teacher's forward pass and as ``fp32`` for a
student's training (:func:`training_float32`). On a CPU ``fp32`` and ``tf32`` are the same (TF32 is
a CUDA feature) and ``bf16`` autocasts on the CPU.

PyTorch keeps the TF32 switches per process, not per thread, and reads them when an operation is
launched. :func:`float32_precision` therefore sets them for the duration of its block and keeps
blocks that want different switches apart in time: a block waits while blocks of the other setting
run in other threads (and, once it waits, later arrivals of the running setting wait behind it),
blocks of the same setting run together. Every operation launched inside a block runs with that
block's switches. Autocast is per thread in PyTorch, so :func:`bf16_autocast` needs no such care.

Importing this module does not import torch (settings name the precisions).
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    import torch

Precision = Literal["fp32", "tf32", "bf16"]
PRECISIONS: tuple[Precision, ...] = ("fp32", "tf32", "bf16")

AGREEMENT_NEEDED = 0.995
"""The fraction of pixels on which labels made at a lower precision must agree with those made in
``fp32`` before that precision is offered as a choice (the lab's teacher and engine checks measure
it)."""

TrainingPrecision = Precision
"""What a student trains at: ``fp32``, ``tf32``, or ``bf16``: the trained part's forward pass under
bfloat16 autocast (its convolutions and matrix products in bfloat16), its logits cast back to the
weights' dtype, so that the weights, their gradients, Adam's state, the loss and the metric stay in
it (``docs/design/training_precision.md``)."""
TRAINING_PRECISIONS: tuple[TrainingPrecision, ...] = PRECISIONS

DistillPrecision = Literal["auto", "fp32", "tf32", "bf16"]
"""The server's setting: a :data:`TrainingPrecision`, or ``auto`` (:func:`training_precision`)."""
DISTILL_PRECISIONS: tuple[DistillPrecision, ...] = ("auto", *TRAINING_PRECISIONS)


def check_precision(precision: str, allowed: tuple[str, ...] = PRECISIONS) -> Precision:
    """``precision`` when it names one of ``allowed`` (all :data:`PRECISIONS` by default);
    ValueError otherwise."""
    if precision not in allowed:
        raise ValueError(f"precision must be one of {', '.join(allowed)}, got {precision!r}")
    return precision  # type: ignore[return-value]  # one of allowed, which are precisions


def training_precision(setting: str, device: torch.device | str) -> TrainingPrecision:
    """What training at ``setting`` (one of :data:`DISTILL_PRECISIONS`; ValueError otherwise) means
    on ``device``: ``auto`` is ``bf16`` on a CUDA device with bfloat16 arithmetic and ``fp32``
    elsewhere (a CPU without bfloat16 units emulates it, several times slower than float32); any
    other setting is itself."""
    import torch

    check_precision(setting, DISTILL_PRECISIONS)
    if setting != "auto":
        return setting  # type: ignore[return-value]  # checked: a training precision
    device = torch.device(device)
    return "bf16" if device.type == "cuda" and torch.cuda.is_bf16_supported() else "fp32"


def training_float32(precision: TrainingPrecision) -> Precision:
    """The float32 setting (:func:`float32_precision`) a student's training at ``precision`` holds:
    its own for ``fp32`` and ``tf32``; ``fp32`` for ``bf16``, whose products run in bfloat16 under
    autocast and whose float32 rest (the loss, the metric) stays IEEE float32."""
    return "fp32" if precision == "bf16" else precision


def float32_switch(precision: Precision) -> str:
    """The value of PyTorch's ``fp32_precision`` switches that ``precision`` runs under on CUDA."""
    return "ieee" if precision == "fp32" else "tf32"


class _SwitchKeeper:
    """Who holds the process's TF32 switches: one setting at a time, held by any number of
    threads."""

    def __init__(self) -> None:
        self._condition = threading.Condition()
        self._setting: str | None = None
        self._last: str | None = None
        self._holders = 0
        self._waiting: Counter[str] = Counter()
        self._before: list[str] = []
        self._depth = threading.local()

    @staticmethod
    def _backends() -> tuple[Any, ...]:
        import torch

        # a CudnnModule at run time: its conv and rnn switches are not in the stubs
        cudnn: Any = torch.backends.cudnn
        return cudnn.conv, cudnn.rnn, torch.backends.cuda.matmul

    def _may_enter(self, setting: str) -> bool:
        """Same setting as the holders, none other waiting; when free, the turn goes to the other
        setting if it waits (the two alternate while both want the switches)."""
        others_waiting = any(count for other, count in self._waiting.items() if other != setting)
        if self._holders == 0:
            return not (others_waiting and setting == self._last)
        return self._setting == setting and not others_waiting

    def acquire(self, setting: str) -> None:
        depth = getattr(self._depth, "value", 0)
        with self._condition:
            # a block inside a block of this thread: it already holds the switches
            if depth:
                if setting != self._setting:
                    raise RuntimeError(
                        f"a {setting} float32 block inside a {self._setting} block of the same "
                        "thread"
                    )
                self._depth.value = depth + 1
                return
            self._waiting[setting] += 1
            try:
                self._condition.wait_for(lambda: self._may_enter(setting))
            finally:
                self._waiting[setting] -= 1
            if self._holders == 0:
                backends = self._backends()
                self._before = [backend.fp32_precision for backend in backends]
                for backend in backends:
                    backend.fp32_precision = setting
                self._setting = self._last = setting
            self._holders += 1
            self._depth.value = 1

    def release(self) -> None:
        with self._condition:
            self._depth.value -= 1
            if self._depth.value:
                return
            self._holders -= 1
            if self._holders == 0:
                for backend, value in zip(self._backends(), self._before, strict=True):
                    backend.fp32_precision = value
                self._setting = None
                self._condition.notify_all()


_KEEPER = _SwitchKeeper()


@contextmanager
def float32_precision(device: torch.device | str, precision: Precision) -> Iterator[None]:
    """Within the block, float32 convolutions and matmuls on a CUDA ``device`` use TF32 unless
    ``precision`` is ``fp32``; the previous switches come back once no block holds them. Waits while
    another thread runs a block of the other setting. A block inside a block of the same thread must
    want the same setting (RuntimeError otherwise). Nothing on a CPU."""
    import torch

    if torch.device(device).type != "cuda":
        yield
        return
    _KEEPER.acquire(float32_switch(precision))
    try:
        yield
    finally:
        _KEEPER.release()


def bf16_autocast(device: torch.device | str, precision: Precision) -> torch.autocast:
    """bfloat16 autocast on ``device``'s type when ``precision`` is ``bf16``, else a disabled
    one."""
    import torch

    return torch.autocast(
        torch.device(device).type, dtype=torch.bfloat16, enabled=precision == "bf16"
    )
