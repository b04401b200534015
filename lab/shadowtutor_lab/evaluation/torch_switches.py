"""What a PyTorch benchmark on a GPU needs around its timed regions: process-wide switches that it turns on for
one measurement and then restores, a wait for the device, and the device's own time for a call."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch.autograd import DeviceType
from torch.autograd.profiler_util import FunctionEvent


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


@dataclass(frozen=True)
class DeviceTime:
    """What a profiled call put on the device: ``seconds`` of kernels, copies and fills in all, ``occupied`` seconds in
    which at least one of them ran (the union of their intervals: at most ``seconds``, less where they overlapped,
    as kernels of several streams and copies beside kernels do), and the ``largest`` of them by name (name, seconds),
    most first."""

    seconds: float
    occupied: float
    largest: list[tuple[str, float]]


def device_time(run: Callable[[], object], device: str, largest: int = 10) -> DeviceTime | None:
    """The device's work for one call of ``run`` on a CUDA ``device`` (kernels, copies and fills, as torch's
    profiler records them through CUPTI), to set against the call's wall time: how busy the device was, and on
    what. Only the device's activity is recorded (operators on the host are not, which costs the most), but
    profiling still slows the host, so ``run`` should be a call beside the timed ones, not one of them. None on
    any other device (``run`` is not called) or where the profiler records no device activity."""
    if not device.startswith("cuda"):
        return None
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as profiler:
        run()
        torch.cuda.synchronize(device)
    return summarise_device_events(profiler.events(), largest)


def summarise_device_events(events: Iterable[FunctionEvent], largest: int = 10) -> DeviceTime | None:
    """The device's work among a profile's ``events``: every kernel, copy and fill once, as the device event it
    is (an operator's own device time repeats the kernels it launched, so operators count nothing), the time in
    which any of them ran, and the ``largest`` names by their summed time. None where no device event took any
    time."""
    by_name: dict[str, float] = {}
    intervals: list[tuple[int, int]] = []
    for event in events:
        if event.device_type != DeviceType.CPU:
            by_name[event.name] = by_name.get(event.name, 0.0) + event.device_time_total / 1e6
            intervals.append((event.time_range.start, event.time_range.end))
    total = sum(by_name.values())
    if total <= 0:
        return None
    ranked = sorted(by_name.items(), key=lambda item: item[1], reverse=True)[:largest]
    return DeviceTime(total, _covered_us(intervals) / 1e6, ranked)


def _covered_us(intervals: list[tuple[int, int]]) -> int:
    """How many microseconds the union of ``intervals`` (start, end) covers."""
    covered, reach = 0, None
    for start, end in sorted(intervals):
        if reach is None or start > reach:
            covered += end - start
            reach = end
        elif end > reach:
            covered += end - reach
            reach = end
    return covered
