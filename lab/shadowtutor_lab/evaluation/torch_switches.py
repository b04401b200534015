"""Process-wide PyTorch switches that a benchmark turns on for one measurement and then restores."""

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
