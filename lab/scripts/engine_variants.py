"""Which variant of the batched distillation engine is fastest on this device: :func:`distill_batch` timed
directly (no server) for every variant at every frame size, on the same inputs and start states.

Variants (run in this order, most important first; ``--variants`` picks some, and a variant's reference
runs before it even when not picked):

- ``grouped-written``, ``matmul-written``, ``grouped-fused``, ``matmul-fused``: the sessions' convolutions
  as one grouped convolution or as im2col and a batched matrix product (``distill_batch``'s
  ``convolution``), the tail as written or fused (``Distiller(fuse_tail=...)``);
- plain names train in IEEE float32 (``Distiller(precision="fp32")``, the server's ``--distill-precision
  fp32``); ``...-tf32``: the same with TF32 tensor cores for convolutions and matrix products
  (``--distill-precision tf32``; nothing changes on a CPU); ``...-bf16``: the same with the back's forward pass in
  bfloat16 under autocast, weights, Adam, loss and metric float32 (``--distill-precision bf16``), which combines
  with ``-graphs`` as ``...-bf16-graphs``;
- ``...-closs``: the same with the batch's loss and metric compiled by ``torch.compile`` (``distill_batch``'s
  ``objective="compiled"``, the server's ``--distill-objective compiled``; the warm-up batch compiles), which
  combines with ``-graphs`` as ``...-closs-graphs``;
- ``...-graphs``: the same with each batch replayed as one CUDA graph captured for its shape (``distill_batch``'s
  ``graphs``, the server's ``--distill-graphs``; nothing changes off CUDA, where it still runs): a second warm-up
  batch captures it, and its row says whether every timed batch replayed it (``graphs_replayed``); one that did
  not, which ran as its plain twin, is never chosen;
- ``...-cudnnbench``: the same with ``torch.backends.cudnn.benchmark`` on for that variant only (restored
  after; nothing changes on a CPU, where it still runs);
- ``grouped-written-compiled``, ``grouped-fused-compiled`` (a study run only when named in ``--variants``, as
  compiling takes a minute or more per size): the engine's front and stacked back compiled by ``torch.compile``
  (inductor, static shapes), the backward of the back's forward included, the fused tail's replicate padding
  written as concatenations, which inductor compiles; the warm-up batch compiles.

Each point (variant x size): ``--sessions`` distillers on the device, each a deep copy of one template
student (random initialisation from ``--seed``), THRESHOLD 0.999 and MAX_UPDATES 8 (every step taken); each
session its own noise frame (uint8 BGR) with labels of a few classes in blocks, the same for every variant.
One warm-up batch, then ``--repeats`` timed batches, each on fresh copies of the point's distillers (copied
outside the timed region, their front fingerprints cached as a server session's are after its first key
frame), each bracketed by ``torch.cuda.synchronize`` on CUDA. A batch's time starts with its key frames
prepared on the host (``KeyFrameJob.prepare``: the server prepares them in its pool, beside the batch being
trained) and includes their upload; their preparation is timed apart, in ms per key frame (``prepare_ms``,
one thread).

Per point: median seconds per batch, key frames/s (sessions / median), ms per key-frame step (median /
steps taken by all sessions), mean steps per key frame, the floating-point operations of one key frame
(torch's ``FlopCounterMode`` on the student: front, first forward, then forward and backward per step;
``--flops-only`` prints them alone) and the rate they were done at (TFLOP/s: how much of the device's
peak the variant uses), peak device memory (null on a CPU), with ``--kernel-time`` on CUDA the device's own
work per batch (kernels, copies and fills of one more batch's training, profiled: their summed time, and the time
in which any of them ran, less where they overlapped), how busy it kept the device (the latter over the median batch
time: well below 1, the host kept the device waiting; null elsewhere), the key frames/s the device allows at that
work (sessions over the time any of it ran: the rate if the host never kept the device waiting) and the ten
kernels that took most of the work, and agreement
with the reference of the same tail and size (``grouped-written`` or ``grouped-fused``; the reference's
warm-up batch against the variant's last timed batch, so the reference's own figures are its run-to-run
noise, 0 where the device is deterministic): the largest metric difference over sessions, the fraction of
sessions with the same step count, the largest difference of a trainable weight, and the fraction of pixels
where the trained students label their key frames as the reference's trained students do. A point that
raises a RuntimeError (out of memory included) or, compiled, fails its graph's checks (AssertionError) is
recorded with its error and the run goes on.

Every figure is printed as soon as measured (one line per point), then the device, the fastest variant
per size and, per size, the server flags of the fastest variant that is a server option (no study switch)
and whose students' labels agree with its reference's on at least 99.5 % of pixels (a reference qualifies
as it is; a ``bf16`` variant by its own bar, P-8 within 0.5 points of fp32's on the accuracy harness's scenes,
which noise frames and a random student cannot measure: docs/design/training_precision.md):
``server flags at 1280x720: --distill-convolution matmul --distill-tail fused --distill-precision tf32``,
after a ``not chosen`` line for each faster server option that agrees less. The JSON at ``--out`` (rewritten
after every point, with the server flags chosen from the points so far) and a Markdown table beside it hold the
same.
A size where the fused tail does not apply (``frame_tail_fusable``) is refused: exit code 2, one line.

Usage: ``python lab/scripts/engine_variants.py --device cuda --out R.json`` (defaults: 64 sessions,
1280x720 and 640x360, 3 timed batches per point)
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
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np
import torch
from torch.utils.flop_counter import FlopCounterMode

from shadowtutor.algorithms import batched_distill, stacked_back
from shadowtutor.algorithms.batched_distill import (
    CONVOLUTIONS,
    Convolution,
    KeyFrameJob,
    Objective,
    distill_batch,
    front_fingerprint,
)
from shadowtutor.algorithms.distill import Distiller, DistillResult
from shadowtutor.algorithms.params import AlgorithmParams
from shadowtutor.classes import LVS_CLASSES, background_index
from shadowtutor.models import fast_student
from shadowtutor.models.fast_student import frame_tail_fusable, fused_back
from shadowtutor.models.precision import AGREEMENT_NEEDED, TrainingPrecision, float32_precision, training_float32
from shadowtutor.models.student import FrontFeatures, StudentNet
from shadowtutor.teachers.base import TeacherError
from shadowtutor.teachers.device import resolve_torch_device
from shadowtutor_lab.cli.options import frame_size, script_command
from shadowtutor_lab.evaluation.engine_inputs import key_frames
from shadowtutor_lab.evaluation.machine import describe_machine, machine_info
from shadowtutor_lab.evaluation.torch_switches import DeviceTime, cudnn_autotuner, device_time, synchronize

VARIANTS = (
    "grouped-written", "matmul-written", "grouped-fused", "matmul-fused", "grouped-fused-graphs", "matmul-fused-graphs",
    "matmul-fused-tf32", "grouped-fused-tf32", "matmul-written-tf32", "grouped-written-graphs", "matmul-written-graphs",
    "grouped-written-cudnnbench", "grouped-fused-cudnnbench", "matmul-fused-bf16", "grouped-fused-bf16",
    "matmul-fused-bf16-graphs", "grouped-fused-closs", "matmul-fused-closs", "grouped-fused-closs-graphs",
    "matmul-fused-closs-graphs",
)
STUDY_VARIANTS = ("grouped-written-compiled", "grouped-fused-compiled")
PARAMS = AlgorithmParams(threshold=0.999, max_updates=8)
GIB = 1024 ** 3


@dataclass(frozen=True)
class Variant:
    """One way to run the engine, read from its name
    ``CONVOLUTION-TAIL[-tf32|-bf16|-closs|-graphs|-closs-graphs|-bf16-graphs|-cudnnbench|-compiled]``."""

    name: str

    @property
    def convolution(self) -> Convolution:
        for convolution in CONVOLUTIONS:
            if self.name.startswith(f"{convolution}-"):
                return convolution
        raise ValueError(f"variant {self.name!r} names none of the engine's convolutions {CONVOLUTIONS}")

    @property
    def fuse_tail(self) -> bool:
        return self.name.split("-")[1] == "fused"

    @property
    def cudnn_benchmark(self) -> bool:
        return self.name.endswith("-cudnnbench")

    @property
    def compiled(self) -> bool:
        return self.name.endswith("-compiled")

    @property
    def graphs(self) -> bool:
        return self.name.endswith("-graphs")

    @property
    def objective(self) -> Objective:
        return "compiled" if "closs" in self.name.split("-") else "eager"

    @property
    def precision(self) -> TrainingPrecision:
        parts = self.name.split("-")
        return "tf32" if "tf32" in parts else "bf16" if "bf16" in parts else "fp32"

    @property
    def server_option(self) -> bool:
        """Whether the server runs this variant (``--distill-convolution``, ``--distill-tail``,
        ``--distill-precision``, ``--distill-objective``, ``--distill-graphs``; no study switch)."""
        return not (self.cudnn_benchmark or self.compiled)

    @property
    def server_flags(self) -> str:
        tail = "fused" if self.fuse_tail else "written"
        flags = f"--distill-convolution {self.convolution} --distill-tail {tail} --distill-precision {self.precision}"
        if self.objective != "eager":
            flags += f" --distill-objective {self.objective}"
        return f"{flags} --distill-graphs" if self.graphs else flags

    @property
    def reference(self) -> str:
        return "grouped-fused" if self.fuse_tail else "grouped-written"


@dataclass
class Outcome:
    """What one batch left: per session the final metric and step count, the trainable weights ``(S, W)`` and
    the trained student's labels of its key frame ``(S, H, W)``."""

    metrics: np.ndarray
    steps: np.ndarray
    weights: torch.Tensor
    labels: torch.Tensor


@dataclass(frozen=True)
class KeyFrameWork:
    """Floating-point operations (torch's ``FlopCounterMode``) of Algorithm 1 in partial mode on one key frame:
    the front once, the back's forward, and one step (the back's forward and backward)."""

    front: float
    back_forward: float
    back_step: float

    def total(self, steps: float) -> float:
        """The whole key frame with ``steps`` steps: the front, the first forward, then a step each."""
        return self.front + self.back_forward + steps * self.back_step


def key_frame_work(template: StudentNet, size: tuple[int, int], fuse_tail: bool) -> KeyFrameWork:
    """Count :class:`KeyFrameWork` on one zero frame of ``size`` (WIDTH, HEIGHT) with a copy of ``template``."""
    student = copy.deepcopy(template)
    student.set_trainable("partial")
    width, height = size
    x = torch.zeros(1, 3, height, width, device=next(student.parameters()).device)

    def back(front: FrontFeatures) -> torch.Tensor:
        return fused_back(student, front) if fuse_tail else student.forward_back(front)

    with torch.no_grad(), FlopCounterMode(display=False) as counted:
        front = student.forward_front(x).detached()
    front_flops = counted.get_total_flops()
    with FlopCounterMode(display=False) as counted:
        back(front)
    forward_flops = counted.get_total_flops()
    with FlopCounterMode(display=False) as counted:
        back(front).sum().backward()
    return KeyFrameWork(float(front_flops), float(forward_flops), float(counted.get_total_flops()))


def parse_sizes(text: str) -> list[tuple[int, int]]:
    sizes = [frame_size(s.strip()) for s in text.split(",") if s.strip()]
    if not sizes:
        raise argparse.ArgumentTypeError(f"expected sizes like 1280x720,640x360, got {text!r}")
    return sizes


def parse_variants(text: str) -> list[str]:
    names = [v.strip() for v in text.split(",") if v.strip()]
    known = (*VARIANTS, *STUDY_VARIANTS)
    unknown = [n for n in names if n not in known]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"unknown variant(s) {', '.join(unknown) or text!r}; use {','.join(known)}")
    return names


def plan(names: list[str]) -> list[Variant]:
    """The variants to run: those named and their references, in the order of :data:`VARIANTS` then
    :data:`STUDY_VARIANTS`."""
    wanted = set(names) | {Variant(n).reference for n in names}
    return [Variant(n) for n in (*VARIANTS, *STUDY_VARIANTS) if n in wanted]


def replicate_pad_by_concatenation(x: torch.Tensor) -> torch.Tensor:
    """:func:`~shadowtutor.models.fast_student.replicate_pad`'s result from slices and concatenations, which inductor
    compiles (its backward of ``replication_pad2d`` fails its own stride check under ``vmap`` in torch 2.14.1)."""
    rows = torch.cat([x[:, :, :1], x, x[:, :, -1:]], dim=2)
    return torch.cat([rows[:, :, :, :1], rows, rows[:, :, :, -1:]], dim=3)


@contextlib.contextmanager
def compiled_engine(on: bool) -> Iterator[None]:
    """While ``on``: the engine's front and its stacked back (whose backward autograd then runs compiled too) are
    compiled by ``torch.compile`` (inductor, static shapes), with Dynamo's recompile limits raised so that each size
    and tail gets its own graph rather than falling back to eager, and the fused tail pads by
    :func:`replicate_pad_by_concatenation`. Nothing changes when ``on`` is False."""
    if not on:
        yield
        return
    limits = torch._dynamo.config.patch(recompile_limit=256, accumulated_recompile_limit=4096)
    padding = mock.patch.object(fast_student, "replicate_pad", replicate_pad_by_concatenation)
    front = mock.patch.object(batched_distill, "per_frame_front",
                              torch.compile(fast_student.per_frame_front, dynamic=False))
    back = mock.patch.object(stacked_back.StackedBack, "__call__",
                             torch.compile(stacked_back.StackedBack.__call__, dynamic=False))
    with front, back, padding, limits:
        yield


@contextlib.contextmanager
def recorded_replays(replays: list[str]) -> Iterator[None]:
    """While open, how the engine trained each batch through ``train_graphed`` is appended to ``replays``
    (``eager``, ``captured``, ``replayed`` or ``failed``; nothing off CUDA, where no batch goes through it)."""
    original = batched_distill.train_graphed

    def recording(*args: Any) -> Any:
        state, how = original(*args)
        replays.append(how)
        return state, how

    with mock.patch.object(batched_distill, "train_graphed", recording):
        yield


@contextlib.contextmanager
def graphs_released() -> Iterator[None]:
    """On leaving, the engine's captured batch of this thread (and its device memory) is dropped, so that one
    point's graph never holds memory through the next points."""
    try:
        yield
    finally:
        batched_distill.release_graphs()


def outcome(distillers: list[Distiller], results: list[DistillResult],
            inputs: list[tuple[np.ndarray, np.ndarray]]) -> Outcome:
    weights, labels = [], []
    for distiller, result, (frame, label) in zip(distillers, results, inputs, strict=True):
        weights.append(torch.cat([result.weights[key].float().reshape(-1) for key in distiller.trainable_keys]))
        with torch.no_grad(), float32_precision(distiller.device, training_float32(distiller.precision)):
            logits = distiller.student(distiller.prepare(frame, label).x)
        labels.append(logits.argmax(1)[0].to(torch.uint8).cpu())
    return Outcome(metrics=np.array([r.metric for r in results]), steps=np.array([r.steps for r in results]),
                   weights=torch.stack(weights), labels=torch.stack(labels))


def agreement(mine: Outcome, reference: Outcome) -> dict[str, float]:
    return {
        "metric_max_diff": float(np.max(np.abs(mine.metrics - reference.metrics))),
        "steps_equal_fraction": float(np.mean(mine.steps == reference.steps)),
        "weights_max_diff": float((mine.weights - reference.weights).abs().max()),
        "labels_agreement": float((mine.labels == reference.labels).float().mean()),
    }


def measure(variant: Variant, template: StudentNet, inputs: list[tuple[np.ndarray, np.ndarray]], device: str,
            repeats: int, kernel_time: bool = False) -> tuple[dict[str, Any], Outcome | None, Outcome]:
    """Time one point; returns its figures, the outcome of its warm-up batch (a reference's only, else None) and
    that of its last timed batch. ``kernel_time``: on CUDA, one more batch after the timed ones, its training
    (not its preparation) profiled for the device's own time (:func:`device_time`)."""
    background = background_index(LVS_CLASSES)
    base = [Distiller(copy.deepcopy(template), PARAMS, background, device, fuse_tail=variant.fuse_tail,
                      precision=variant.precision) for _ in inputs]
    for distiller in base:
        front_fingerprint(distiller)  # cached on the distiller, as a server session's is after its first key frame

    replays: list[str] = []

    def prepare() -> tuple[float, list[Distiller], list[KeyFrameJob]]:
        distillers = copy.deepcopy(base)
        synchronize(device)
        start = time.perf_counter()
        jobs = [KeyFrameJob.prepare(d, frame, label) for d, (frame, label) in zip(distillers, inputs, strict=True)]
        synchronize(device)
        return time.perf_counter() - start, distillers, jobs

    def train(jobs: list[KeyFrameJob]) -> list[DistillResult]:
        with compiled_engine(variant.compiled), recorded_replays(replays):
            return distill_batch(jobs, convolution=variant.convolution, graphs=variant.graphs,
                                 objective=variant.objective)

    def batch() -> tuple[float, float, list[Distiller], list[DistillResult]]:
        preparation, distillers, jobs = prepare()
        start = time.perf_counter()
        results = train(jobs)
        synchronize(device)
        return time.perf_counter() - start, preparation, distillers, results

    def profiled_batch() -> DeviceTime | None:
        _, _, jobs = prepare()
        return device_time(lambda: train(jobs), device)

    with cudnn_autotuner(variant.cudnn_benchmark), graphs_released():
        _, _, *warm = batch()
        warm_up = outcome(*warm, inputs) if variant.name == variant.reference else None
        if variant.graphs:
            batch()  # the batch that captures the shape's graph
        replays.clear()
        timed = [batch() for _ in range(repeats)]
        last = outcome(*timed[-1][2:], inputs)
        on_device = profiled_batch() if kernel_time else None
    seconds = [t[0] for t in timed]
    median = statistics.median(seconds)
    steps = int(last.steps.sum())
    return {
        "batch_seconds": seconds,
        "median_s": median,
        "key_frames_per_s": len(inputs) / median,
        "ms_per_step": 1000 * median / steps if steps else None,
        "mean_steps": float(last.steps.mean()),
        "prepare_ms": 1000 * statistics.median(t[1] for t in timed) / len(inputs),
        "peak_bytes": torch.cuda.max_memory_allocated(device) if device.startswith("cuda") else None,
        "graphs_replayed": bool(replays) and all(how == "replayed" for how in replays) if variant.graphs else None,
        "device_s": None if on_device is None else on_device.seconds,
        "device_occupied_s": None if on_device is None else on_device.occupied,
        "device_busy": None if on_device is None else on_device.occupied / median,
        "device_bound_key_frames_per_s": None if on_device is None else len(inputs) / on_device.occupied,
        "device_largest": None if on_device is None else on_device.largest,
    }, warm_up, last


def run_point(variant: Variant, size: tuple[int, int], template: StudentNet,
              inputs: list[tuple[np.ndarray, np.ndarray]], device: str, repeats: int,
              references: dict[str, Outcome], work: KeyFrameWork, kernel_time: bool = False) -> dict[str, Any]:
    """One point's row (figures or error); a reference's warm-up outcome is kept in ``references``; ``work``:
    the operations of one key frame with this variant's tail; ``kernel_time`` as :func:`measure` takes it."""
    width, height = size
    row: dict[str, Any] = {
        "size": f"{width}x{height}", "variant": variant.name, "convolution": variant.convolution,
        "tail": "fused" if variant.fuse_tail else "written", "cudnn_benchmark": variant.cudnn_benchmark,
        "precision": variant.precision, "compiled": variant.compiled, "graphs": variant.graphs,
        "objective": variant.objective,
        "autocast": "bf16" if variant.precision == "bf16" else None, "sessions": len(inputs),
        "reference": variant.reference,
        "error": None,
    }
    if device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats(device)
    try:
        figures, warm_up, last = measure(variant, template, inputs, device, repeats, kernel_time)
    except (RuntimeError, AssertionError) as exc:  # out of memory; a compiled graph's own checks assert
        row["error"] = f"{type(exc).__name__}: {exc}"
    else:
        row.update(figures)
        gflop = work.total(figures["mean_steps"]) / 1e9
        row.update(gflop_per_key_frame=gflop, achieved_tflops=len(inputs) * gflop / figures["median_s"] / 1000)
        if warm_up is not None:  # a reference's
            references[variant.reference] = warm_up
        reference = references.get(variant.reference)
        row.update(agreement(last, reference) if reference is not None else
                   {"metric_max_diff": None, "steps_equal_fraction": None, "weights_max_diff": None,
                    "labels_agreement": None})
    gc.collect()
    if device.startswith("cuda"):
        torch.cuda.empty_cache()
    return row


def work_line(size: tuple[int, int], fuse_tail: bool, work: KeyFrameWork) -> str:
    steps = PARAMS.max_updates
    return (f"{size[0]}x{size[1]} {'fused' if fuse_tail else 'written'} tail: front {work.front / 1e9:.2f} GFLOP, "
            f"back forward {work.back_forward / 1e9:.2f}, one step {work.back_step / 1e9:.2f}: "
            f"{work.total(steps) / 1e9:.1f} GFLOP per key frame at {steps} steps")


def point_line(row: dict[str, Any]) -> str:
    head = f"{row['size']:>9} {row['variant']:<27} {row['sessions']} sessions:"
    if row["error"] is not None:
        return f"{head} FAILED {row['error'].splitlines()[0][:300]}"
    ms_step = "-" if row["ms_per_step"] is None else f"{row['ms_per_step']:.3f}"
    peak = "-" if row["peak_bytes"] is None else f"{row['peak_bytes'] / GIB:.2f} GiB"
    line = (f"{head} {row['key_frames_per_s']:.1f} key frames/s, {row['median_s']:.3f} s/batch, {ms_step} ms/step, "
            f"{row['mean_steps']:.2f} steps, {row['achieved_tflops']:.2f} TFLOP/s, peak {peak}, "
            f"prepare {row['prepare_ms']:.1f} ms/key frame")
    if row["device_busy"] is not None:
        largest = "; ".join(f"{name[:60]} {seconds:.3f} s" for name, seconds in row["device_largest"][:3])
        line += (f", device busy {100 * row['device_busy']:.0f} % ({row['device_occupied_s']:.3f} s occupied, "
                 f"{row['device_s']:.3f} s of work per batch; at most {row['device_bound_key_frames_per_s']:.1f} "
                 f"key frames/s at this work; most: {largest})")
    if row["graphs_replayed"] is not None:
        line += ", graphs replayed" if row["graphs_replayed"] else ", graphs not replayed (ran eagerly)"
    if row["metric_max_diff"] is None:
        return f"{line}, vs {row['reference']}: not run"
    return (f"{line}, vs {row['reference']}: metric {row['metric_max_diff']:.1e}, "
            f"steps {100 * row['steps_equal_fraction']:.0f}%, weights {row['weights_max_diff']:.1e}, "
            f"labels {100 * row['labels_agreement']:.2f}%")


def fastest(rows: list[dict[str, Any]]) -> list[str]:
    """Per size: the fastest variant, and the fastest in float32 where that is another one."""
    lines = []
    for size in dict.fromkeys(r["size"] for r in rows):
        done = [r for r in rows if r["size"] == size and r["error"] is None]
        if not done:
            lines.append(f"fastest at {size}: none (every point failed)")
            continue
        best = max(done, key=lambda r: r["key_frames_per_s"])
        text = f"fastest at {size}: {best['variant']} {best['key_frames_per_s']:.1f} key frames/s"
        fp32 = [r for r in done if r["autocast"] is None]
        if best["autocast"] is not None and fp32:
            best32 = max(fp32, key=lambda r: r["key_frames_per_s"])
            text += f"; in float32: {best32['variant']} {best32['key_frames_per_s']:.1f} key frames/s"
        lines.append(text)
    return lines


def agrees(row: dict[str, Any]) -> bool:
    """A reference as it is; a ``bf16`` variant by its own bar (P-8 on the accuracy harness's scenes, measured
    there: docs/design/training_precision.md); another variant when its students' labels agree with the
    reference's on at least :data:`AGREEMENT_NEEDED` of the pixels."""
    if row["variant"] == row["reference"] or Variant(row["variant"]).precision == "bf16":
        return True
    return row["labels_agreement"] is not None and row["labels_agreement"] >= AGREEMENT_NEEDED


def choose(rows: list[dict[str, Any]]) -> dict[str, tuple[dict[str, Any], list[dict[str, Any]]]]:
    """Per size: the fastest server option that :func:`agrees`, and the faster server options that do not; a
    graphs variant counts only where every batch replayed its graph (elsewhere it ran as its plain twin)."""
    chosen = {}
    for size in dict.fromkeys(r["size"] for r in rows):
        done = [r for r in rows if r["size"] == size and r["error"] is None and Variant(r["variant"]).server_option
                and r.get("graphs_replayed") is not False]
        fine = [r for r in done if agrees(r)]
        if fine:
            best = max(fine, key=lambda r: r["key_frames_per_s"])
            faster = [r for r in done if not agrees(r) and r["key_frames_per_s"] > best["key_frames_per_s"]]
            chosen[size] = (best, faster)
    return chosen


def why_not(row: dict[str, Any]) -> str:
    if row["labels_agreement"] is None:
        return f"not compared ({row['reference']} did not run)"
    return (f"its students' labels agree with {row['reference']} on {100 * row['labels_agreement']:.2f} % of pixels "
            f"(needs {100 * AGREEMENT_NEEDED:.1f} %)")


def server_flags(rows: list[dict[str, Any]]) -> dict[str, str]:
    """Per size: the server flags of the variant :func:`choose` picks."""
    return {size: Variant(best["variant"]).server_flags for size, (best, _) in choose(rows).items()}


def summary(rows: list[dict[str, Any]]) -> list[str]:
    """The fastest variants, then per size the faster server options not chosen and the server flags."""
    lines = fastest(rows)
    for size, (best, refused) in choose(rows).items():
        lines += [f"not chosen at {size}: {r['variant']} {r['key_frames_per_s']:.1f} key frames/s, {why_not(r)}"
                  for r in refused]
        lines.append(f"server flags at {size}: {Variant(best['variant']).server_flags}")
    return lines


def device_line(device: str) -> str:
    machine = describe_machine(machine_info())
    if not device.startswith("cuda"):
        return f"device: cpu, {machine}"
    properties = torch.cuda.get_device_properties(device)
    return (f"device: {device}, {properties.name} ({properties.total_memory / GIB:.1f} GiB), "
            f"CUDA {torch.version.cuda}, cuDNN {torch.backends.cudnn.version()}, "
            f"float32 switches outside the distillers' own: matmul {torch.backends.cuda.matmul.fp32_precision}, "
            f"cudnn {torch.backends.cudnn.conv.fp32_precision}; {machine}")


def render(results: dict[str, Any]) -> str:
    lines = ["# Batched distillation engine: variants", "", results["device"], "", "```", results["command"], "```", "",
             f"{results['sessions']} sessions per batch, THRESHOLD {PARAMS.threshold}, MAX_UPDATES "
             f"{PARAMS.max_updates}, median of {results['repeats']} batches after one warm-up.", "",
             "| size | variant | key frames/s | s/batch | ms/step | steps | TFLOP/s | peak GiB | device busy | "
             "device bound (key frames/s) | reference | metric diff | steps equal | weights diff | labels agree |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]

    def number(value: float | None, spec: str) -> str:
        return "-" if value is None else format(value, spec)

    for row in results["rows"]:
        if row["error"] is not None:
            lines.append(f"| {row['size']} | {row['variant']} | failed: {row['error'].splitlines()[0][:200]} "
                         "|  |  |  |  |  |  |  |  |  |  |  |  |")
            continue
        peak = None if row["peak_bytes"] is None else row["peak_bytes"] / GIB
        equal = None if row["steps_equal_fraction"] is None else 100 * row["steps_equal_fraction"]
        agree = None if row["labels_agreement"] is None else 100 * row["labels_agreement"]
        busy = None if row.get("device_busy") is None else 100 * row["device_busy"]
        bound = row.get("device_bound_key_frames_per_s")
        lines.append(
            f"| {row['size']} | {row['variant']} | {row['key_frames_per_s']:.1f} | {row['median_s']:.3f} | "
            f"{number(row['ms_per_step'], '.3f')} | {row['mean_steps']:.2f} | {row['achieved_tflops']:.2f} | "
            f"{number(peak, '.2f')} | {number(busy, '.0f')} % | {number(bound, '.1f')} | "
            f"{row['reference']} | {number(row['metric_max_diff'], '.1e')} | {number(equal, '.0f')} % | "
            f"{number(row['weights_max_diff'], '.1e')} | {number(agree, '.2f')} % |")
    return "\n".join([*lines, "", *summary(results["rows"])]) + "\n"


def write(results: dict[str, Any], out: Path | None) -> None:
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(results, indent=1) + "\n")
        out.with_suffix(".md").write_text(render(results))


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="auto", help="auto (default), cpu, cuda[:N]")
    parser.add_argument("--sessions", type=int, default=64, help="sessions (key frames) per batch (default 64)")
    parser.add_argument("--sizes", type=parse_sizes, default=[(1280, 720), (640, 360)],
                        help="frame sizes WIDTHxHEIGHT, comma-separated (default 1280x720,640x360)")
    parser.add_argument("--repeats", type=int, default=3, help="timed batches per point, after one warm-up (default 3)")
    parser.add_argument("--variants", type=parse_variants, default=list(VARIANTS),
                        help=f"comma-separated, of {','.join(VARIANTS)} (default: all of these) and the "
                             f"studies {','.join(STUDY_VARIANTS)}")
    parser.add_argument("--out", type=Path, help="results JSON; the Markdown table goes beside it (same stem)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the template student and the inputs (default 0)")
    parser.add_argument("--kernel-time", action="store_true",
                        help="on CUDA, profile one more batch per point for the device's own time per batch, and "
                        "report how busy the device was (that time over the median batch time)")
    parser.add_argument("--flops-only", action="store_true",
                        help="print the operations of one key frame per size and tail (8 steps), time nothing")
    args = parser.parse_args(argv)
    if args.sessions < 2 or args.repeats < 1:
        parser.error("--sessions must be at least 2 and --repeats at least 1")
    refused = [f"{w}x{h}" for w, h in args.sizes if not frame_tail_fusable(h, w)]
    if refused:
        print(f"engine_variants: the fused tail does not apply at {', '.join(refused)} (frame_tail_fusable); "
              "pick sizes like 1280x720 or 640x360", file=sys.stderr)
        return 2
    try:
        device = resolve_torch_device(args.device)
    except TeacherError as exc:
        print(f"engine_variants: {exc}", file=sys.stderr)
        return 2
    variants = plan(args.variants)
    torch.manual_seed(args.seed)
    template = StudentNet(num_classes=len(LVS_CLASSES)).to(device)
    results: dict[str, Any] = {
        "command": script_command(__file__, argv), "device": device_line(device), "machine": machine_info(),
        "sessions": args.sessions, "repeats": args.repeats, "seed": args.seed, "threshold": PARAMS.threshold,
        "max_updates": PARAMS.max_updates, "rows": [],
    }
    if args.flops_only:
        for size in args.sizes:
            for fuse_tail in (False, True):
                print(work_line(size, fuse_tail, key_frame_work(template, size, fuse_tail)), flush=True)
        return 0
    for size in args.sizes:
        inputs = key_frames(args.sessions, size[0], size[1], args.seed)
        references: dict[str, Outcome] = {}
        work = {fuse: key_frame_work(template, size, fuse) for fuse in (False, True)}
        for variant in variants:
            row = run_point(variant, size, template, inputs, device, args.repeats, references, work[variant.fuse_tail],
                            args.kernel_time)
            results["rows"].append(row)
            results["server_flags"] = server_flags(results["rows"])  # a run cut short keeps its choice so far
            print(point_line(row), flush=True)
            write(results, args.out)
    print(results["device"])
    print("\n".join(summary(results["rows"])), flush=True)
    write(results, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
