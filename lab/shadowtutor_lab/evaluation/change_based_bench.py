"""``shadowtutor bench change-based``: change-based inference against full-frame backends, per clip.

Per clip, every frame goes through each backend in turn (round-robin, so load from other
processes falls on all alike): ``torch`` and ``onnx`` full-frame, and the change-based student
whose fallback is the fastest full-frame backend. Reported: ms per frame and speed-ups, pixel
agreement with full-frame labels (``torch``), mIoU against the truth where the clip has it,
the changed fraction per layer and how many frames ran change-based, in full or fell back.
A second pass with the fallback off measures, frame by frame, what change-based execution
costs against the fraction of input pixels that changed: the measured cut-over point.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import torch

from shadowtutor.acceleration.change_based.backend import ChangeBasedOptions
from shadowtutor.acceleration.change_based.runner import fused_tail_fits
from shadowtutor.acceleration.change_based.work import point_work, work_bound
from shadowtutor.acceleration.labellers.base import holding
from shadowtutor.acceleration.labellers.change_based import ChangeBasedLabeller
from shadowtutor.acceleration.labellers.student import StudentLabeller
from shadowtutor.algorithms.metrics import miou
from shadowtutor.models.inference import onnx_available
from shadowtutor.models.student import StudentNet
from shadowtutor_lab.evaluation.clips import Clip
from shadowtutor_lab.evaluation.machine import describe_machine

CUTOVER_BIN = 0.05


def _timed(fn, frame: np.ndarray) -> tuple[float, np.ndarray]:
    start = time.perf_counter()
    out = fn(frame)
    return time.perf_counter() - start, out


def full_frame_kinds() -> tuple[str, ...]:
    return ("torch", "onnx") if onnx_available() else ("torch",)


def bench_clip(student: StudentNet, clip: Clip, options: ChangeBasedOptions, threads: int,
               warmup: int) -> dict[str, Any]:
    """One clip: latency of each backend, agreement, mIoU, changed fractions, frame modes."""
    kinds = full_frame_kinds()
    full = {kind: holding(StudentLabeller(kind, threads=threads), student) for kind in kinds}
    fastest = kinds[-1]
    changed = holding(ChangeBasedLabeller(StudentLabeller(fastest, change_based=True, threads=threads), options),
                      student)
    names = [*kinds, "change-based"]
    backends = {**{k: full[k].label for k in kinds}, "change-based": changed.label}
    seconds: dict[str, list[float]] = {name: [] for name in names}
    agreement, modes, fractions = [], {"change": 0, "full": 0, "fallback": 0}, []
    scores: dict[str, list[float]] = {"torch": [], "change-based": []}
    num_classes = student.num_classes
    for index, frame in enumerate(clip.frames):
        labels = {}
        for name in names:
            elapsed, labels[name] = _timed(backends[name], frame)
            if index >= warmup:
                seconds[name].append(elapsed)
        if index < warmup:
            continue
        agreement.append(float(np.mean(labels["change-based"] == labels["torch"])))
        stats = changed.stats().change
        assert stats is not None
        modes[stats.mode] += 1
        if stats.changed:
            fractions.append(stats.changed)
        if clip.truth is not None:
            for name in scores:
                scores[name].append(miou(labels[name], clip.truth[index], num_classes))
    ms = {name: 1000.0 * float(np.mean(values)) for name, values in seconds.items()}
    result: dict[str, Any] = {
        "clip": clip.name, "frames": len(clip.frames) - warmup, "fallback_backend": fastest,
        "ms": ms,
        "speedup_vs_same_backend": ms["torch"] / ms["change-based"],
        "speedup_vs_fastest": min(ms[k] for k in kinds) / ms["change-based"],
        "agreement": float(np.mean(agreement)), "min_frame_agreement": float(np.min(agreement)),
        "modes": modes,
        "changed_fraction": {name: float(np.mean([f[name] for f in fractions])) for name in fractions[0]}
        if fractions else {},
    }
    if clip.truth is not None:
        result["miou"] = {name: 100.0 * float(np.mean(values)) for name, values in scores.items()}
    return result


def cutover_samples(student: StudentNet, clips: Sequence[Clip], options: ChangeBasedOptions, threads: int,
                    warmup: int) -> tuple[list[tuple[float, float]], list[dict[str, Any]]]:
    """(input changed fraction, change-based ms / fastest full-frame ms) per frame with the fallback off,
    and per clip what change-based execution alone does: mean ms of both, agreement with the full-frame
    labels, the changed fraction per layer."""
    kinds = full_frame_kinds()
    samples, per_clip = [], []
    for clip in clips:
        fractions, agreement, seconds = [], [], {"change-based": [], kinds[-1]: []}
        fastest = holding(StudentLabeller(kinds[-1], threads=threads), student)
        alone = holding(ChangeBasedLabeller(StudentLabeller(kinds[-1], change_based=True, threads=threads),
                                            replace(options, fallback_fraction=1.0)), student)
        assert alone.backend is not None
        runner = alone.backend.runner
        runner.refresh_interval = len(clip.frames) + 1
        runner.backoff_frames = 0  # change-based on every frame, however slow
        for index, frame in enumerate(clip.frames):
            full_s, full_labels = _timed(fastest.label, frame)
            change_s, labels = _timed(runner.infer, frame)
            if index >= warmup and runner.stats.mode == "change":
                samples.append((runner.stats.input_fraction, change_s / full_s))
                fractions.append(runner.stats.changed)
                agreement.append(float(np.mean(labels == full_labels)))
                seconds["change-based"].append(change_s)
                seconds[kinds[-1]].append(full_s)
        if not fractions:
            per_clip.append({})
            continue
        mean_fractions = {name: float(np.mean([f[name] for f in fractions])) for name in fractions[0]}
        height, width = clip.frames[0].shape[:2]
        work = point_work(student, (height, width), fused_tail=fused_tail_fits(height, width))
        per_clip.append({
            "changed_fraction": mean_fractions,
            "work_bound": work_bound(mean_fractions, work),
            "ms": {name: 1000.0 * float(np.mean(values)) for name, values in seconds.items()},
            "agreement": float(np.mean(agreement)), "min_frame_agreement": float(np.min(agreement)),
            "frames": len(agreement),
        })
    return samples, per_clip


def cutover_point(samples: Sequence[tuple[float, float]]) -> dict[str, Any]:
    """Mean cost ratio per bin of input changed fraction; the cut-over is the lower edge of the
    first bin where change-based execution is not faster than the full-frame fallback."""
    bins: dict[int, list[float]] = {}
    for fraction, ratio in samples:
        bins.setdefault(int(fraction / CUTOVER_BIN), []).append(ratio)
    table = [{"from": b * CUTOVER_BIN, "to": (b + 1) * CUTOVER_BIN, "frames": len(r), "ratio": float(np.mean(r))}
             for b, r in sorted(bins.items())]
    slower = [row["from"] for row in table if row["ratio"] >= 1.0]
    return {"bins": table, "cutover": min(slower) if slower else None}


def run_change_based_bench(student: StudentNet, clips: Sequence[Clip], options: ChangeBasedOptions,
                           threads: int = 1, warmup: int = 2) -> dict[str, Any]:
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        runs = [bench_clip(student, clip, options, threads, warmup) for clip in clips]
        samples, forced = cutover_samples(student, clips, options, threads, warmup)
        cutover = cutover_point(samples)
        for run, alone in zip(runs, forced, strict=True):
            run["changed_fraction_fallback_off"] = alone.get("changed_fraction", {})
            if alone:
                run["fallback_off"] = {key: alone[key]
                                       for key in ("ms", "agreement", "min_frame_agreement", "frames", "work_bound")}
    finally:
        torch.set_num_threads(previous)
    return {"threads": threads, "runs": runs, "cutover": cutover,
            "options": {"scale": options.scale, "fallback_fraction": options.fallback_fraction,
                        "refresh_interval": options.refresh_interval,
                        "thresholds_file": str(options.thresholds_file) if options.thresholds_file else "built-in"}}


def end_to_end(student: StudentNet, class_names: tuple[str, ...], clip: Clip, options: ChangeBasedOptions,
               threads: int) -> dict[str, Any]:
    """P-8 (partial distillation every key frame, 8 frames' delay) with and without change-based edges."""
    from shadowtutor.algorithms.params import AlgorithmParams
    from shadowtutor.teachers.base import TeacherBase
    from shadowtutor_lab.evaluation.harness import evaluate_scene

    if clip.truth is None:
        raise ValueError(f"the end-to-end run needs a clip with truth (a generated scene), not {clip.name}")
    truth = clip.truth

    class TruthTeacher(TeacherBase):
        """The clip's ground truth as the teacher (as in ``bench accuracy``)."""

        name = "truth"
        device = "cpu"

        def __init__(self) -> None:
            self.class_names = class_names

        def _label_batch(self, frames, frame_indices):
            return [truth[i] for i in frame_indices]

    kinds = full_frame_kinds()
    runs = {}
    for name, change_based in (("full-frame", None), ("change-based", options)):
        evaluation = evaluate_scene(clip.name, clip.frames, TruthTeacher(), student, class_names,
                                    AlgorithmParams(), kinds[-1], threads, settings=("p8",),
                                    change_based=change_based)
        trace = evaluation.traces["p8"]
        runs[name] = {"miou": 100.0 * float(np.mean(trace.miou)), "fps": len(clip.frames) / evaluation.seconds,
                      "key_frames": len(trace.key_frames)}
    return {"scene": clip.name, "frames": len(clip.frames), "backend": kinds[-1], "runs": runs}


def _bound(value: float | None) -> str:
    if value is None:
        return "—"  # results made before the bound was reported
    return "unbounded (nothing changed)" if math.isinf(value) else f"{value:.2f}x"


def render_markdown(results: dict[str, Any]) -> str:
    machine = results.get("machine", {})
    lines = [
        "# Change-based inference benchmark",
        "",
        f"Machine: {describe_machine(machine)}; {results['threads']} thread(s). "
        f"Student: {results.get('student', '?')}. Options: {results['options']}.",
        "",
        "```",
        results.get("command", ""),
        "```",
        "",
        "ms per frame (mean over the timed frames); speed-ups of the change-based student against `torch`",
        "full-frame (the same backend) and against the fastest full-frame backend; agreement = pixels labelled",
        "as full-frame `torch` labels them; mIoU against the generated scene's truth.",
        "",
        "| clip | frames | torch ms | onnx ms | change-based ms | vs torch | vs fastest | agreement (%) | "
        "mIoU full / change-based | change / full / fallback frames |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for run in results["runs"]:
        ms = run["ms"]
        scores = run.get("miou")
        score = f"{scores['torch']:.2f} / {scores['change-based']:.2f}" if scores else "—"
        modes = run["modes"]
        lines.append(
            f"| {run['clip']} | {run['frames']} | {ms['torch']:.1f} | {ms.get('onnx', float('nan')):.1f} | "
            f"{ms['change-based']:.1f} | {run['speedup_vs_same_backend']:.2f}x | {run['speedup_vs_fastest']:.2f}x | "
            f"{100 * run['agreement']:.3f} | {score} | {modes['change']} / {modes['full']} / {modes['fallback']} |"
        )
    alone = [run for run in results["runs"] if run.get("fallback_off")]
    if alone:
        lines += ["", "Every frame change-based (fallback off, refresh only at the first frame): what change-based",
                  "execution itself costs and keeps, against the fastest full-frame backend timed on the same frames.",
                  "Work bound: the student's multiply-adds over those at the measured changed fractions, the speed-up",
                  "over the same dense arithmetic if only changed positions cost anything (no gathering, no neighbour",
                  "recomputed): an upper bound that no implementation of these thresholds can pass.",
                  "", "| clip | frames | change-based ms | full-frame ms | speed-up | agreement (%) | "
                  "worst frame (%) | work bound |", "|---|---|---|---|---|---|---|---|"]
        for run in alone:
            off = run["fallback_off"]
            full_name = next(name for name in off["ms"] if name != "change-based")
            change_ms, full_ms = off["ms"]["change-based"], off["ms"][full_name]
            lines.append(f"| {run['clip']} | {off['frames']} | {change_ms:.1f} | {full_ms:.1f} ({full_name}) | "
                         f"{full_ms / change_ms:.2f}x | {100 * off['agreement']:.3f} | "
                         f"{100 * off['min_frame_agreement']:.2f} | {_bound(off.get('work_bound'))} |")
    for key, title in (("changed_fraction", "mean over the change-based frames above"),
                       ("changed_fraction_fallback_off", "every frame change-based: the cut-over pass below")):
        layer_names = next((list(r[key]) for r in results["runs"] if r.get(key)), [])
        if not layer_names:
            continue
        lines += ["", f"Changed fraction per layer input ({title}, %):", "",
                  "| layer | " + " | ".join(r["clip"] for r in results["runs"]) + " |",
                  "|---|" + "---|" * len(results["runs"])]
        for name in layer_names:
            cells = [f"{100 * r[key][name]:.1f}" if r.get(key) else "—" for r in results["runs"]]
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
    cut = results["cutover"]
    lines += ["", "Cut-over (fallback off): change-based ms / full-frame fallback ms by fraction of input pixels "
              "that changed:", "", "| changed input | frames | ratio |", "|---|---|---|"]
    for row in cut["bins"]:
        lines.append(f"| {100 * row['from']:.0f}-{100 * row['to']:.0f} % | {row['frames']} | {row['ratio']:.2f} |")
    cutover = "none within the measured range" if cut["cutover"] is None else f"{100 * cut['cutover']:.0f} %"
    lines += ["", f"Measured cut-over: {cutover} of the input's pixels."]
    e2e = results.get("end_to_end")
    if e2e:
        lines += ["", f"End-to-end ShadowTutor (P-8, in-process harness, {e2e['scene']}, {e2e['frames']} frames):",
                  "", "| edge student | P-8 mIoU (%) | FPS (whole loop, distillation included) |", "|---|---|---|"]
        for name, row in e2e["runs"].items():
            lines.append(f"| {name} | {row['miou']:.2f} | {row['fps']:.2f} |")
    notes = results.get("notes", [])
    if notes:
        lines += ["", "Notes:", "", *[f"- {n}" for n in notes]]
    return "\n".join(lines) + "\n"
