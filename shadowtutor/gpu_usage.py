"""How busy one NVIDIA GPU is, sampled from NVML (``pynvml``, package ``nvidia-ml-py``) in a daemon
thread.

NVML's ``utilization.gpu`` is the percentage of its last sample period (1/6 s to 1 s, by GPU) during
which at least one kernel ran; a sample here is that figure / 100 and the memory in use on the GPU
(by every process). Where ``pynvml`` is not installed or no NVIDIA driver answers,
:func:`gpu_monitoring_available` is False and nothing raises until a sampler is started.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any

log = logging.getLogger(__name__)


class GpuMonitoringUnavailable(RuntimeError):
    """NVML cannot be used here: ``pynvml`` is missing, no NVIDIA driver, or no such GPU (the
    message says)."""


@dataclass(frozen=True)
class GpuSample:
    """One NVML reading of a GPU: when it was taken, how busy the GPU was and the memory in use."""

    # time.monotonic() when read
    t: float
    # utilization.gpu / 100, in [0, 1]
    busy: float
    memory_used_bytes: int


def _pynvml() -> ModuleType | None:
    try:
        import pynvml
    except ImportError:
        return None
    return pynvml


def _nvml_errors(nvml: ModuleType) -> tuple[type[BaseException], ...]:
    return (getattr(nvml, "NVMLError", OSError), OSError)


def _open_device(nvml: ModuleType, device_index: int) -> Any:
    """``nvmlInit`` and the handle of GPU ``device_index`` (NVML's numbering); the caller shuts NVML
    down. Raises :class:`GpuMonitoringUnavailable` (NVML shut down again) when either fails."""
    try:
        nvml.nvmlInit()
    except _nvml_errors(nvml) as exc:
        raise GpuMonitoringUnavailable(f"NVML cannot start (no NVIDIA driver?): {exc}") from None
    try:
        count = nvml.nvmlDeviceGetCount()
        handle = (
            nvml.nvmlDeviceGetHandleByIndex(device_index) if 0 <= device_index < count else None
        )
    except _nvml_errors(nvml) as exc:
        nvml.nvmlShutdown()
        raise GpuMonitoringUnavailable(f"NVML cannot open GPU {device_index}: {exc}") from None
    if handle is None:
        nvml.nvmlShutdown()
        raise GpuMonitoringUnavailable(f"no GPU {device_index}: NVML sees {count}")
    return handle


def gpu_monitoring_available(device_index: int = 0) -> bool:
    """Whether NVML can sample GPU ``device_index`` here; False, never an exception, without
    ``pynvml``, a driver or that GPU."""
    nvml = _pynvml()
    if nvml is None:
        return False
    try:
        _open_device(nvml, device_index)
    except GpuMonitoringUnavailable:
        return False
    nvml.nvmlShutdown()
    return True


def nvml_index(cuda_index: int) -> int:
    """NVML's number of the GPU that torch calls ``cuda:cuda_index`` (they differ under
    ``CUDA_VISIBLE_DEVICES``); ``cuda_index`` itself where the GPU's UUID cannot be matched."""
    nvml = _pynvml()
    if nvml is None:
        return cuda_index
    try:
        import torch

        uuid = str(torch.cuda.get_device_properties(cuda_index).uuid)
        nvml.nvmlInit()
    except _nvml_errors(nvml) + (RuntimeError, AssertionError, AttributeError):
        return cuda_index
    try:
        name = uuid if uuid.startswith(("GPU-", "MIG-")) else f"GPU-{uuid}"
        return int(nvml.nvmlDeviceGetIndex(nvml.nvmlDeviceGetHandleByUUID(name)))
    except _nvml_errors(nvml):
        return cuda_index
    finally:
        nvml.nvmlShutdown()


class GpuUsageSampler:
    """Samples GPU ``device_index`` (NVML's numbering) every ``interval_s`` seconds in a daemon
    thread.

    :meth:`start` raises :class:`GpuMonitoringUnavailable` where :func:`gpu_monitoring_available` is
    False. ``on_sample`` (if given) is called in the sampling thread with each :class:`GpuSample`.
    ``samples`` holds the last ``keep`` samples since start (None: all); :meth:`busy_fraction` is
    the mean busy fraction of every sample since start, kept or not. A sample that NVML fails to
    read is counted in ``failures`` (the first is logged) and sampling goes on.
    """

    def __init__(
        self,
        device_index: int = 0,
        interval_s: float = 0.1,
        on_sample: Callable[[GpuSample], None] | None = None,
        *,
        keep: int | None = None,
    ) -> None:
        if not interval_s > 0:
            raise ValueError(f"interval_s must be positive, got {interval_s}")
        if keep is not None and keep < 1:
            raise ValueError(f"keep must be None or at least 1, got {keep}")
        self.device_index = device_index
        self.interval_s = interval_s
        self.on_sample = on_sample
        self.failures = 0
        self._samples: deque[GpuSample] = deque(maxlen=keep)
        self._busy_total = 0.0
        self._count = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._nvml: ModuleType | None = None

    def start(self) -> None:
        """Open the GPU and sample from now on (the samples and mean of an earlier run are
        dropped)."""
        if self._thread is not None:
            raise RuntimeError("the GPU sampler is already running")
        nvml = _pynvml()
        if nvml is None:
            raise GpuMonitoringUnavailable("pynvml is not installed (pip install nvidia-ml-py)")
        handle = _open_device(nvml, self.device_index)
        self._nvml = nvml
        with self._lock:
            self._samples.clear()
            self._busy_total, self._count, self.failures = 0.0, 0, 0
        self._stop.clear()
        self._thread = threading.Thread(
            target=self._run, args=(nvml, handle), name="shadowtutor-gpu-usage", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        """Stop sampling and shut NVML down; the samples stay readable. Does nothing when not
        running."""
        if self._thread is None:
            return
        self._stop.set()
        self._thread.join()
        self._thread = None
        if self._nvml is not None:
            self._nvml.nvmlShutdown()
            self._nvml = None

    @property
    def samples(self) -> list[GpuSample]:
        with self._lock:
            return list(self._samples)

    def busy_fraction(self) -> float | None:
        """Mean of utilization.gpu / 100 over the samples since start; None before the first
        sample."""
        with self._lock:
            return self._busy_total / self._count if self._count else None

    def _run(self, nvml: ModuleType, handle: Any) -> None:
        while True:
            try:
                sample = GpuSample(
                    time.monotonic(),
                    nvml.nvmlDeviceGetUtilizationRates(handle).gpu / 100.0,
                    int(nvml.nvmlDeviceGetMemoryInfo(handle).used),
                )
            except _nvml_errors(nvml) as exc:
                self.failures += 1
                if self.failures == 1:
                    log.warning(
                        "cannot read GPU %d's utilisation from NVML: %s", self.device_index, exc
                    )
            else:
                with self._lock:
                    self._samples.append(sample)
                    self._busy_total += sample.busy
                    self._count += 1
                if self.on_sample is not None:
                    self.on_sample(sample)
            if self._stop.wait(self.interval_s):
                return
