"""``shadowtutor bench student``: student inference latency per backend, and label agreement.

Backends are timed round-robin frame by frame (each frame goes through every backend before
the next frame), so that load from other processes falls on all of them alike. Agreement is
the fraction of pixels whose label equals the ``reference`` backend's (plain ``StudentNet``).
The cost of installing a weight update (``load_weights``) is timed too: the edge does it
after every key frame.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from shadowtutor.models.backends import CPU_BACKENDS
from shadowtutor.models.inference import BUILDABLE_BACKENDS, InferenceBackend, TorchBackend, build_inference_backend
from shadowtutor.models.student import StudentNet
from shadowtutor_lab.evaluation.machine import describe_machine

Size = tuple[int, int]
REFERENCE = "reference"
UNFUSED = "(tail unfused)"


@dataclass(frozen=True)
class StudentBenchConfig:
    sizes: tuple[Size, ...] = ((1280, 720), (640, 360))
    frames: int = 30  # timed frames per size and backend
    warmup: int = 3
    backends: tuple[str, ...] = CPU_BACKENDS
    threads: tuple[int, ...] = ()  # () = torch's current thread count
    update_trials: int = 5
    unfused_tail: bool = False  # also time torch and onnx with the tail unfused (FastStudent.fuse_tail)

    def __post_init__(self) -> None:
        if REFERENCE not in self.backends:
            raise ValueError(f"the backends must include {REFERENCE!r} (agreement is measured against it)")
        unknown = set(self.backends) - set(BUILDABLE_BACKENDS)
        if unknown:
            raise ValueError(f"unknown backends {sorted(unknown)}; known: {', '.join(BUILDABLE_BACKENDS)}")
        if self.frames <= 0 or self.warmup < 0 or self.update_trials <= 0 or not self.sizes:
            raise ValueError("frames and update_trials must be positive, warmup >= 0, and sizes non-empty")


def latency_stats(seconds: Sequence[float]) -> dict[str, float]:
    ms = np.asarray(seconds) * 1000.0
    mean = float(ms.mean())
    return {
        "mean_ms": mean,
        "p50_ms": float(np.percentile(ms, 50)),
        "p90_ms": float(np.percentile(ms, 90)),
        "fps": 1000.0 / mean,
    }


def _time(fn: Callable[[], Any]) -> tuple[float, Any]:
    start = time.perf_counter()
    out = fn()
    return time.perf_counter() - start, out


def bench_size(
    backends: dict[str, InferenceBackend], frames: Sequence[np.ndarray], warmup: int
) -> dict[str, dict[str, float]]:
    """Latency and agreement with the reference of every backend; the first ``warmup`` frames are not timed."""
    if len(frames) <= warmup:
        raise ValueError(f"{len(frames)} frames leave none to time after {warmup} warm-up frames")
    for backend in backends.values():
        for frame in frames[:warmup]:
            backend.infer(frame)
    seconds: dict[str, list[float]] = {name: [] for name in backends}
    agreement: dict[str, list[float]] = {name: [] for name in backends}
    for frame in frames[warmup:]:
        labels = {}
        for name, backend in backends.items():
            elapsed, labels[name] = _time(lambda b=backend, f=frame: b.infer(f))
            seconds[name].append(elapsed)
        for name in backends:
            agreement[name].append(float(np.mean(labels[name] == labels[REFERENCE])))
    return {
        name: {
            **latency_stats(seconds[name]),
            "agreement": float(np.mean(agreement[name])),
            "min_frame_agreement": float(np.min(agreement[name])),
        }
        for name in backends
    }


def bench_updates(backends: dict[str, InferenceBackend], student: StudentNet, trials: int) -> dict[str, Any]:
    """Mean ms of ``load_weights`` with a partial and with a full update, per backend."""
    state = student.state_dict()
    updates = {mode: {k: state[k].clone() for k in student.trainable_keys(mode)} for mode in ("partial", "full")}
    results: dict[str, Any] = {}
    for name, backend in backends.items():
        results[name] = {}
        for mode, update in updates.items():
            seconds = [_time(lambda b=backend, u=update: b.load_weights(u))[0] for _ in range(trials)]
            results[name][f"{mode}_ms"] = 1000.0 * float(np.mean(seconds))
    return results


def unfused_tail_backends(kinds: Sequence[str], student: StudentNet, threads: int) -> dict[str, InferenceBackend]:
    """``torch`` and ``onnx`` of ``kinds`` with the tail unfused, named ``<kind> (tail unfused)``."""
    backends: dict[str, InferenceBackend] = {}
    if "torch" in kinds:
        backends[f"torch {UNFUSED}"] = TorchBackend(student, fuse_tail=False)
    if "onnx" in kinds:
        from shadowtutor.models.onnx_student import OnnxBackend

        backends[f"onnx {UNFUSED}"] = OnnxBackend(student, threads=threads, fuse_tail=False)
    return backends


def run_student_bench(
    student: StudentNet, frames_for: Callable[[Size, int], list[np.ndarray]], config: StudentBenchConfig
) -> dict[str, Any]:
    """Measure every backend at every size and thread count; ``frames_for(size, n)`` gives the frames."""
    default_threads = torch.get_num_threads()
    results: dict[str, Any] = {"runs": []}
    frames = {size: frames_for(size, config.frames + config.warmup) for size in config.sizes}
    try:
        for threads in config.threads or (default_threads,):
            torch.set_num_threads(threads)
            backends = {kind: build_inference_backend(kind, student, threads) for kind in config.backends}
            if config.unfused_tail:
                backends.update(unfused_tail_backends(config.backends, student, threads))
            for size in config.sizes:
                run = bench_size(backends, frames[size], config.warmup)
                results["runs"].append({"threads": threads, "size": f"{size[0]}x{size[1]}", "backends": run})
            results.setdefault("update_ms", {})[str(threads)] = bench_updates(
                backends, student, config.update_trials
            )
    finally:
        torch.set_num_threads(default_threads)
    return results


def render_markdown(results: dict[str, Any]) -> str:
    machine = results.get("machine", {})
    lines = [
        "# Student inference benchmark",
        "",
        f"Machine: {describe_machine(machine)}. Student: {results.get('student', '?')}. "
        f"Frames: {results.get('frames_source', '?')}.",
        "",
        "```",
        results.get("command", ""),
        "```",
        "",
        "Backends: `reference` = StudentNet as written (PyTorch float32, NCHW, BatchNorm, argmax over",
        "channels); `torch` = FastStudent in PyTorch (instance norm, head conv folded and moved before",
        "the last upsampling, the linear tail fused into one convolution at dec3's resolution where the",
        "upsampling is exactly x4, channels-last, per-class argmax); `onnx` = the FastStudent graph in ONNX",
        f"Runtime; `... {UNFUSED}`: the same without the fused tail. Agreement: fraction of pixels labelled",
        "as the reference labels them.",
        "",
        "| Size | Threads | Backend | mean (ms) | p50 (ms) | p90 (ms) | FPS | agreement (%) | speed-up |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for run in results["runs"]:
        reference = run["backends"][REFERENCE]["mean_ms"]
        for name, r in run["backends"].items():
            lines.append(
                f"| {run['size']} | {run['threads']} | {name} | {r['mean_ms']:.1f} | {r['p50_ms']:.1f} | "
                f"{r['p90_ms']:.1f} | {r['fps']:.2f} | {100 * r['agreement']:.5f} | {reference / r['mean_ms']:.2f}x |"
            )
    lines += ["", "Installing a weight update (`load_weights`), mean ms:", "",
              "| Threads | Backend | partial update | full update |", "|---|---|---|---|"]
    for threads, per_backend in results.get("update_ms", {}).items():
        for name, r in per_backend.items():
            lines.append(f"| {threads} | {name} | {r['partial_ms']:.1f} | {r['full_ms']:.1f} |")
    notes = results.get("notes", [])
    if notes:
        lines += ["", "Notes:", "", *[f"- {n}" for n in notes]]
    return "\n".join(lines) + "\n"
