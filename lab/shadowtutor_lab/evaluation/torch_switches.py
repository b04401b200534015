"""What a PyTorch benchmark on a GPU needs around its timed regions: process-wide switches that it turns on for
one measurement and then restores, a wait for the device, and the device's own time for a call."""

from __future__ import annotations

from collections.abc import Callable, Iterator
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


def kernel_seconds(run: Callable[[], object], device: str) -> float | None:
    """Seconds of work that one call of ``run`` puts on a CUDA ``device`` (kernels, copies and fills, summed as
    torch's profiler records them through CUPTI), to set against the call's wall time: how busy the device was.
    Profiling slows the host, so ``run`` should be a call beside the timed ones, not one of them. None on any
    other device (``run`` is not called) or where the profiler records no device activity."""
    if not device.startswith("cuda"):
        return None
    with torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    ) as profiler:
        run()
        torch.cuda.synchronize(device)
    microseconds = sum(event.self_device_time_total for event in profiler.key_averages())
    return microseconds / 1e6 if microseconds > 0 else None
