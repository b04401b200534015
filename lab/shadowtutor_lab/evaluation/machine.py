"""What a benchmark ran on: CPU model, thread counts and library versions."""

from __future__ import annotations

import os
import platform
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

# Environment variables that change how many threads the math libraries use, or how they wait.
THREAD_ENV = ("OMP_NUM_THREADS", "OMP_WAIT_POLICY", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo`` on Linux, else what ``platform`` knows)."""
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        for line in cpuinfo.read_text(errors="replace").splitlines():
            if line.lower().startswith(("model name", "hardware")) and ":" in line:
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine() or "unknown"


def _version(module: str) -> str | None:
    try:
        return __import__(module).__version__
    except ImportError:
        return None


def describe_machine(machine: Mapping[str, Any]) -> str:
    """``CPU model, N CPUs; torch X, onnxruntime Y`` from a :func:`machine_info` dict, ``?`` for what it lacks."""
    return (f"{machine.get('cpu_model', '?')}, {machine.get('cpu_count', '?')} CPUs; torch "
            f"{machine.get('torch', '?')}, onnxruntime {machine.get('onnxruntime', '?')}")


def machine_info() -> dict[str, Any]:
    import torch

    return {
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "torch": str(torch.__version__),
        "onnxruntime": _version("onnxruntime"),
        "numpy": _version("numpy"),
        "opencv": _version("cv2"),
        "thread_env": {k: os.environ[k] for k in THREAD_ENV if k in os.environ},
    }
