"""Where the host's time of a batch of the batched distillation engine goes, outside its training steps, and
what the garbage collector adds: the engine's bookkeeping, measured on the host.

On a GPU a batch at 640x360 is bounded by the host (docs/design/batched_distillation.md): whatever the engine
thread does besides issuing the steps' kernels delays them. This script times, on ``--device`` (default the
CPU, one thread, at a frame size where the steps are cheap: ``--size``, default 64x48), ``--batches`` batches
of ``--sessions`` sessions that trained once before (Adam state present, as a server's sessions after their
first key frame), THRESHOLD 0.999 and MAX_UPDATES 8, and splits each batch's wall time into:

- ``gather``: every session's weights, Adam moments and step count stacked into the batch's rows;
- ``training``: Algorithm 1 on the rows (on a CPU mostly the kernels' own time);
- ``scatter``: the rows written back into each session's weights and moments, and its step counts set;
- ``rest``: the key frames' uploads, the results copied to the host and split per session, everything else;
- ``outside_training``: the batch less its training.

Each figure is the median over the batches. On CUDA the phases are the host's time to issue their work (the
kernels run asynchronously; longer where the launch queue is full and the host waits), a batch starts with the
device idle and ends when its results are on the host, so ``rest`` also holds the wait for the device's last
kernels; the GPU's own time is ``engine_variants.py --kernel-time``'s.

Each phase's time includes the collector's passes that fell in it; ``gc`` reports the passes of each
generation per batch and their milliseconds per batch, with the startup heap (the process's objects before the
first batch: torch, the students) left to the collector or frozen out of its full passes
(``--freeze-heap``, :func:`shadowtutor.heap.startup_heap_frozen`, as the server does at startup).

Usage: ``python lab/scripts/engine_host_time.py [--device cpu] [--sessions 64] [--size 64x48]
[--convolution matmul] [--tail fused] [--batches 5] [--freeze-heap] [--out R.json]``
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import gc
import json
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import torch

from shadowtutor.algorithms import batched_distill
from shadowtutor.algorithms.batched_distill import CONVOLUTIONS, KeyFrameJob, distill_batch, front_fingerprint
from shadowtutor.algorithms.distill import Distiller
from shadowtutor.algorithms.params import AlgorithmParams
from shadowtutor.classes import LVS_CLASSES, background_index
from shadowtutor.heap import startup_heap_frozen
from shadowtutor.models.student import StudentNet
from shadowtutor_lab.cli.options import frame_size, script_command
from shadowtutor_lab.evaluation.engine_inputs import key_frames
from shadowtutor_lab.evaluation.machine import machine_info
from shadowtutor_lab.evaluation.server_bench import device_name

PHASES = {"gather": (batched_distill._BatchedRun, "_state"), "training": (batched_distill._Training, "__call__"),
          "scatter": (batched_distill._BatchedRun, "_scatter")}
"""The phases timed directly: the engine's methods that do them (``scatter`` also takes ``_write_steps``)."""


class CollectorWatch:
    """Counts the garbage collector's passes per generation and their seconds while installed."""

    def __init__(self) -> None:
        self.passes = [0, 0, 0]
        self.seconds = [0.0, 0.0, 0.0]
        self._started = 0.0

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
        else:
            self.passes[info["generation"]] += 1
            self.seconds[info["generation"]] += time.perf_counter() - self._started

    @contextlib.contextmanager
    def installed(self) -> Iterator[CollectorWatch]:
        gc.callbacks.append(self)
        try:
            yield self
        finally:
            gc.callbacks.remove(self)


@contextlib.contextmanager
def timed_phases(spent: dict[str, float]) -> Iterator[None]:
    """While open, the engine's phase methods add their seconds to ``spent`` (by phase name)."""

    def timing(name: str, method: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return method(*args, **kwargs)
            finally:
                spent[name] = spent.get(name, 0.0) + time.perf_counter() - started
        return timed

    with contextlib.ExitStack() as stack:
        for name, (owner, attribute) in PHASES.items():
            stack.enter_context(mock.patch.object(owner, attribute, timing(name, getattr(owner, attribute))))
        run = batched_distill._BatchedRun
        stack.enter_context(mock.patch.object(run, "_write_steps", timing("scatter", run._write_steps)))
        yield


def measure(sessions: int, size: tuple[int, int], convolution: str, fuse_tail: bool, batches: int,
            freeze_heap: bool, device: torch.device, seed: int = 0) -> dict[str, Any]:
    """Median milliseconds per batch of each phase and of the whole batch, and the collector's passes."""
    torch.manual_seed(seed)
    template = StudentNet(num_classes=len(LVS_CLASSES))
    inputs = key_frames(sessions, size[0], size[1], seed)
    params = AlgorithmParams(threshold=0.999, max_updates=8)
    background = background_index(LVS_CLASSES)
    distillers = [Distiller(copy.deepcopy(template), params, background, device, fuse_tail=fuse_tail) for _ in inputs]
    for distiller in distillers:
        front_fingerprint(distiller)

    def jobs() -> list[KeyFrameJob]:
        return [KeyFrameJob.prepare(d, f, lab) for d, (f, lab) in zip(distillers, inputs, strict=True)]

    per_batch: list[dict[str, float]] = []
    watch = CollectorWatch()
    # as on a GPU: every batch takes MAX_UPDATES steps
    with mock.patch.object(batched_distill, "stops_early_on_host", lambda device: False):
        distill_batch(jobs(), convolution)  # the sessions' first key frame: Adam state from here on
        with contextlib.ExitStack() as heap:
            frozen = heap.enter_context(startup_heap_frozen()) if freeze_heap else 0
            heap.enter_context(watch.installed())
            for _ in range(batches):
                batch = jobs()
                if device.type == "cuda":
                    torch.cuda.synchronize(device)
                spent: dict[str, float] = {}
                with timed_phases(spent):
                    started = time.perf_counter()
                    distill_batch(batch, convolution)
                    spent["batch"] = time.perf_counter() - started
                spent["rest"] = spent["batch"] - sum(spent[name] for name in PHASES)
                spent["outside_training"] = spent["batch"] - spent["training"]
                per_batch.append(spent)
    names = [*PHASES, "rest", "batch", "outside_training"]
    return {
        "ms": {name: 1000 * statistics.median(b[name] for b in per_batch) for name in names},
        "gc": {"passes_per_batch": [n / batches for n in watch.passes],
               "ms_per_batch": [1000 * s / batches for s in watch.seconds]},
        "frozen_objects": frozen, "tracked_objects": len(gc.get_objects()),
    }


def lines(result: dict[str, Any], args: argparse.Namespace) -> list[str]:
    ms, collector = result["ms"], result["gc"]
    heap = f"frozen ({result['frozen_objects']:,} objects)" if args.freeze_heap else "left to the collector"
    return [
        f"host time of a batch on {result['device']}, {args.sessions} sessions at {args.size[0]}x{args.size[1]}, "
        f"{args.convolution}, "
        f"{args.tail} tail, median of {args.batches} batches, ms; startup heap {heap}:",
        "| gather | training | scatter | rest | batch | outside training |", "|---:|---:|---:|---:|---:|---:|",
        f"| {ms['gather']:.1f} | {ms['training']:.0f} | {ms['scatter']:.1f} | {ms['rest']:.1f} | {ms['batch']:.0f} "
        f"| {ms['outside_training']:.1f} |",
        "garbage collector per batch, generations 0 / 1 / 2: passes "
        + " / ".join(f"{n:g}" for n in collector["passes_per_batch"]) + ", ms "
        + " / ".join(f"{s:.1f}" for s in collector["ms_per_batch"]),
    ]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu", help="cpu (default, one thread), cuda[:N]")
    parser.add_argument("--sessions", type=int, default=64, help="sessions per batch (default 64)")
    parser.add_argument("--size", type=frame_size, default=(64, 48), help="frame size WIDTHxHEIGHT (default 64x48)")
    parser.add_argument("--convolution", choices=CONVOLUTIONS, default="matmul", help="default matmul")
    parser.add_argument("--tail", choices=("fused", "written"), default="fused", help="default fused")
    parser.add_argument("--batches", type=int, default=5, help="timed batches (default 5)")
    parser.add_argument("--freeze-heap", action="store_true",
                        help="freeze the startup heap out of the collector's full passes, as the server does")
    parser.add_argument("--out", type=Path, help="results JSON")
    args = parser.parse_args(argv)
    if args.sessions < 2:
        parser.error("--sessions must be at least 2")
    if args.batches < 1:
        parser.error("--batches must be at least 1")
    try:
        device = torch.device(args.device)
    except RuntimeError:
        parser.error(f"--device {args.device}: unknown device; use cpu or cuda[:N]")
    if device.type == "cpu":
        torch.set_num_threads(1)
    elif device.type != "cuda" or not torch.cuda.is_available():
        parser.error(f"--device {args.device}: use cpu, or cuda on a machine with a CUDA device")
    result = measure(args.sessions, args.size, args.convolution, args.tail == "fused", args.batches,
                     args.freeze_heap, device)
    result["device"] = device_name(device)
    table = lines(result, args)
    print("\n".join(table))
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"command": script_command(__file__, argv), "torch": torch.__version__,
                                        "machine": machine_info(), **result}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
