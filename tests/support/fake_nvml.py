"""A fake ``pynvml`` (NVML's Python bindings, package nvidia-ml-py) for machines without an NVIDIA GPU.

Its calls, their arguments and the types they return are those of nvidia-ml-py; install it with
``monkeypatch.setitem(sys.modules, "pynvml", FakeNVML([...]))``.
"""

from __future__ import annotations

import threading
import types
from dataclasses import dataclass


class FakeNVMLError(Exception):
    pass


@dataclass
class Utilization:
    gpu: int
    memory: int = 0


@dataclass
class Memory:
    used: int
    total: int = 80 * 2**30
    free: int = 0


class FakeNVML(types.ModuleType):
    """Two GPUs; GPU 1 reports ``busy_percent`` in turn (then the last forever), 1 GiB more memory each read."""

    NVMLError = FakeNVMLError

    def __init__(self, busy_percent: list[int], driver: bool = True, fail_reads: int = 0) -> None:
        super().__init__("pynvml")
        self.busy_percent, self.driver, self.fail_reads = list(busy_percent), driver, fail_reads
        self.reads = 0
        self.open = 0  # nvmlInit calls not yet shut down
        self.all_read = threading.Event()

    def nvmlInit(self) -> None:
        if not self.driver:
            raise FakeNVMLError("NVML Shared Library Not Found")
        self.open += 1

    def nvmlShutdown(self) -> None:
        self.open -= 1

    def nvmlDeviceGetCount(self) -> int:
        return 2

    def nvmlDeviceGetHandleByIndex(self, index: int) -> str:
        return f"handle-{index}"

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> str:
        if uuid != "GPU-0000-1111":
            raise FakeNVMLError("Not Found")
        return "handle-1"

    def nvmlDeviceGetIndex(self, handle: str) -> int:
        return int(handle.removeprefix("handle-"))

    def nvmlDeviceGetUtilizationRates(self, handle: str) -> Utilization:
        assert handle == "handle-1"
        if self.fail_reads:
            self.fail_reads -= 1
            raise FakeNVMLError("GPU is lost")
        self.reads += 1
        if self.reads >= len(self.busy_percent):
            self.all_read.set()
        return Utilization(self.busy_percent[min(self.reads, len(self.busy_percent)) - 1])

    def nvmlDeviceGetMemoryInfo(self, handle: str) -> Memory:
        return Memory(used=self.reads * 2**30)
