"""What a PyTorch benchmark on a GPU needs around its timed regions: process-wide switches that it turns on for
one measurement and then restores, and a wait for the device."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch


@contextmanager
def cudnn_autotuner(on: bool) -> Iterator[None]:
    """cuDNN's autotuner (``torch.backends.cudnn.benchmark``: it times the convolution algorithms per input
    shape and keeps the fastest, instead of its heuristics' pick) on or off within the block; the previous
    setting comes back afterwards, an exception included. Nothing changes on a CPU."""
    before = torch.backends.cudnn.benchmark
    torch.backends.cudnn.benchmark = on
    try:
        yield
    finally:
        torch.backends.cudnn.benchmark = before


def synchronize(device: str) -> None:
    """Wait until a CUDA ``device`` has run everything queued on it (bracketing a timed region); nothing elsewhere."""
    if device.startswith("cuda"):
        torch.cuda.synchronize(device)
