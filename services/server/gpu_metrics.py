"""The server's GPU gauges (``gpu_busy_ratio``, ``gpu_memory_used_bytes``), fed by an NVML sampler.

Only a server whose device is CUDA, on a machine where NVML sees that GPU, samples; otherwise the
gauges stay 0 and nothing runs.
"""

from __future__ import annotations

import logging

import torch

from services.server.metrics import ServerMetrics
from shadowtutor.gpu_usage import GpuSample, GpuUsageSampler, gpu_monitoring_available, nvml_index

log = logging.getLogger(__name__)
SAMPLE_SECONDS = 1.0  # NVML's own utilisation window is 1/6 s to 1 s; Prometheus scrapes every 15 s


def start_gpu_metrics(device: torch.device, metrics: ServerMetrics,
                      interval_s: float = SAMPLE_SECONDS) -> GpuUsageSampler | None:
    """A started sampler that sets ``metrics.gpu_busy`` and ``metrics.gpu_memory_used`` every ``interval_s``
    from the GPU of ``device``, or None (nothing started) where ``device`` is not CUDA or NVML cannot see it."""
    if device.type != "cuda":
        return None
    index = nvml_index(torch.cuda.current_device() if device.index is None else device.index)
    if not gpu_monitoring_available(index):
        log.warning("no GPU metrics: NVML cannot read GPU %d (is nvidia-ml-py installed, the driver visible?)",
                    index)
        return None

    def update(sample: GpuSample) -> None:
        metrics.gpu_busy.set(sample.busy)
        metrics.gpu_memory_used.set(sample.memory_used_bytes)

    sampler = GpuUsageSampler(index, interval_s, on_sample=update, keep=1)
    sampler.start()
    return sampler


def stop_gpu_metrics(sampler: GpuUsageSampler | None, metrics: ServerMetrics) -> None:
    """Stop ``sampler`` (None: nothing to stop); the gauges go back to 0."""
    if sampler is not None:
        sampler.stop()
    metrics.gpu_busy.set(0)
    metrics.gpu_memory_used.set(0)
