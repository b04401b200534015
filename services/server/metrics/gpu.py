"""The server's GPU gauges (``gpu_busy_ratio``, ``gpu_memory_used_bytes``), fed by an NVML sampler.

NVML's utilisation covers a short period (1/6 s to 1 s by GPU), so the sampler reads it every
``interval_s`` (0.1 s) and ``gpu_busy_ratio`` is the mean of the samples of the last ``window_s`` (1
s): a scrape sees the last second, not one instant. Memory is the last sample's. Only a server whose
device is CUDA, on a machine where NVML sees that GPU, samples; otherwise the gauges stay 0 and
nothing runs.
"""

from __future__ import annotations

import logging

import torch

from services.server.metrics.server_metrics import ServerMetrics
from shadowtutor.gpu_usage import GpuSample, GpuUsageSampler, gpu_monitoring_available, nvml_index

log = logging.getLogger(__name__)
SAMPLE_SECONDS = 0.1
WINDOW_SECONDS = 1.0


def start_gpu_metrics(
    device: torch.device,
    metrics: ServerMetrics,
    interval_s: float = SAMPLE_SECONDS,
    window_s: float = WINDOW_SECONDS,
) -> GpuUsageSampler | None:
    """A started sampler that sets ``metrics.gpu_busy`` (mean over ``window_s``) and
    ``metrics.gpu_memory_used`` every ``interval_s`` from the GPU of ``device``, or None (nothing
    started) where ``device`` is not CUDA or NVML cannot see it."""
    if device.type != "cuda":
        return None
    index = nvml_index(torch.cuda.current_device() if device.index is None else device.index)
    if not gpu_monitoring_available(index):
        log.warning(
            "no GPU metrics: NVML cannot read GPU %d (is nvidia-ml-py installed, the driver "
            "visible?)",
            index,
        )
        return None

    def update(sample: GpuSample) -> None:
        window = sampler.samples
        metrics.gpu_busy.set(sum(s.busy for s in window) / len(window))
        metrics.gpu_memory_used.set(sample.memory_used_bytes)

    sampler = GpuUsageSampler(
        index, interval_s, on_sample=update, keep=max(1, round(window_s / interval_s))
    )
    sampler.start()
    return sampler


def stop_gpu_metrics(sampler: GpuUsageSampler | None, metrics: ServerMetrics) -> None:
    """Stop ``sampler`` (None: nothing to stop); the gauges go back to 0."""
    if sampler is not None:
        sampler.stop()
    metrics.gpu_busy.set(0)
    metrics.gpu_memory_used.set(0)
