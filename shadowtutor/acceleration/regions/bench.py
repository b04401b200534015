"""``shadowtutor bench regions``: the region flow path against the student alone (seed 004, Table III style).

Every method labels the same frames, timed round-robin frame by frame (each frame goes
through every method before the next), so that load from other processes falls on all of
them alike; the speed-up is each method's FPS over the student's in the same run. Methods:

* ``student``: the student on every whole frame (the reference);
* ``dn@THR``: regions, the decision network with threshold THR picks the path;
* ``fixed@K``: regions, each segmented every K frames and warped in between (DVSNet's baseline).

On generated scenes mIoU is against the truth; on real clips only agreement with the
student (fraction of pixels labelled alike) and speed are measured. Two side studies back
the design: the student's context (a region segmented alone vs cut from the whole frame)
and the flow method (DIS presets vs Farneback: time per region, agreement of warped labels).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from shadowtutor.acceleration.regions.decision import DecisionNetwork
from shadowtutor.acceleration.regions.flow import FLOW_METHODS, FlowEstimator
from shadowtutor.acceleration.regions.grid import RegionGrid, crop, inner
from shadowtutor.acceleration.regions.labeller import (
    FLOW,
    DecisionPolicy,
    FixedIntervalPolicy,
    PathPolicy,
    RegionLabeller,
)
from shadowtutor.algorithms.metrics import miou

Segment = Callable[[np.ndarray], np.ndarray]
STUDENT = "student"


@dataclass(frozen=True)
class RegionBenchConfig:
    thresholds: tuple[float, ...] = (0.9, 0.93, 0.95, 0.97)
    intervals: tuple[int, ...] = (2, 3, 4, 6)
    regions: int = 4
    max_key_age: int = 15
    warmup: int = 3

    def method_names(self) -> list[str]:
        return [STUDENT, *(f"dn@{t:g}" for t in self.thresholds), *(f"fixed@{k}" for k in self.intervals)]


def _labellers(segment: Segment, network: DecisionNetwork, config: RegionBenchConfig) -> dict[str, RegionLabeller]:
    policies: dict[str, PathPolicy] = {f"dn@{t:g}": DecisionPolicy(network, t) for t in config.thresholds}
    policies.update({f"fixed@{k}": FixedIntervalPolicy(k) for k in config.intervals})
    return {name: RegionLabeller(segment, policy, config.regions, max_key_age=config.max_key_age)
            for name, policy in policies.items()}


def run_clip(frames: Iterable[np.ndarray], truth: Iterable[np.ndarray] | None, segment: Segment,
             network: DecisionNetwork, num_classes: int, config: RegionBenchConfig) -> dict[str, dict[str, Any]]:
    """Per method: seconds, frames, mean mIoU against ``truth`` (if given), agreement with the student."""
    labellers = _labellers(segment, network, config)
    methods: dict[str, Callable[[np.ndarray], np.ndarray]] = {STUDENT: segment}
    methods.update({name: labeller.label for name, labeller in labellers.items()})
    stats = {name: {"seconds": 0.0, "frames": 0, "miou": [], "agreement": [], "flow_regions": 0, "regions": 0}
             for name in methods}
    truths = iter(truth) if truth is not None else None
    for index, frame in enumerate(frames):
        label = next(truths) if truths is not None else None
        outputs = {}
        for name, method in methods.items():
            start = time.perf_counter()
            outputs[name] = method(frame)
            elapsed = time.perf_counter() - start
            s = stats[name]
            if index >= config.warmup:
                s["seconds"] += elapsed
                s["frames"] += 1
            if name in labellers:
                paths = labellers[name].last.paths  # type: ignore[union-attr]
                s["flow_regions"] += sum(p == FLOW for p in paths)
                s["regions"] += len(paths)
        for name, out in outputs.items():
            s = stats[name]
            s["agreement"].append(float((out == outputs[STUDENT]).mean()))
            if label is not None:
                s["miou"].append(miou(out, label, num_classes))
    return {name: {"seconds": s["seconds"], "frames": s["frames"],
                   "miou": float(np.mean(s["miou"])) if s["miou"] else None,
                   "agreement": float(np.mean(s["agreement"])),
                   "flow_fraction": s["flow_regions"] / s["regions"] if s["regions"] else 0.0}
            for name, s in stats.items()}


def summarise(clips: Sequence[dict[str, dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """Methods over several clips: FPS over all timed frames, mean mIoU and agreement over clips."""
    out: dict[str, dict[str, Any]] = {}
    for name in clips[0]:
        seconds = sum(c[name]["seconds"] for c in clips)
        frames = sum(c[name]["frames"] for c in clips)
        mious = [c[name]["miou"] for c in clips if c[name]["miou"] is not None]
        out[name] = {"fps": frames / seconds if seconds else 0.0,
                     "miou": float(np.mean(mious)) if mious else None,
                     "agreement": float(np.mean([c[name]["agreement"] for c in clips])),
                     "flow_fraction": float(np.mean([c[name]["flow_fraction"] for c in clips]))}
    base = out[STUDENT]["fps"]
    for row in out.values():
        row["speedup"] = row["fps"] / base if base else 0.0
    return out


def fixed_interval_at(summary: dict[str, dict[str, Any]], speedup: float, key: str = "miou") -> float | None:
    """The fixed-interval baseline's ``key`` at ``speedup``, linearly interpolated between its runs."""
    points = sorted((row["speedup"], row[key]) for name, row in summary.items()
                    if name.startswith("fixed@") and row[key] is not None)
    if len(points) < 2 or not points[0][0] <= speedup <= points[-1][0]:
        return None
    return float(np.interp(speedup, [p[0] for p in points], [p[1] for p in points]))


def context_study(frames: Sequence[np.ndarray], truth: Sequence[np.ndarray], segment: Segment, num_classes: int,
                  margins: Sequence[int] = (0, 32, 64, 96), regions: int = 4) -> list[dict[str, Any]]:
    """Regions segmented alone (with a margin) against cut from the whole frame's labels, and against the truth."""
    whole = [segment(f) for f in frames]
    rows = [{"context": "whole frame", "agreement": 1.0,
             "miou": float(np.mean([miou(w, t, num_classes) for w, t in zip(whole, truth, strict=True)]))}]
    for margin in margins:
        agreement, scores = [], []
        for frame, full, label in zip(frames, whole, truth, strict=True):
            grid = RegionGrid(frame.shape[1], frame.shape[0], regions, margin)
            out = np.empty_like(full)
            for r, box in enumerate(grid.boxes):
                context = grid.margin_box(r)
                labels = crop(segment(np.ascontiguousarray(crop(frame, context))), inner(box, context))
                out[box[1]:box[3], box[0]:box[2]] = labels
            agreement.append(float((out == full).mean()))
            scores.append(miou(out, label, num_classes))
        rows.append({"context": f"region + {margin} px", "agreement": float(np.mean(agreement)),
                     "miou": float(np.mean(scores))})
    return rows


def flow_study(frames: Sequence[np.ndarray], segment: Segment, ages: Sequence[int] = (1, 5, 10),
               regions: int = 4) -> list[dict[str, Any]]:
    """Per flow method: ms per region (flow + warp) and agreement of warped key labels with the student's."""
    labels = [segment(f) for f in frames]
    boxes = RegionGrid(frames[0].shape[1], frames[0].shape[0], regions).boxes
    rows = []
    for method in FLOW_METHODS:
        flow = FlowEstimator(method)
        greys = [flow.small_grey(f) for f in frames]
        row: dict[str, Any] = {"method": method}
        times = []
        for age in ages:
            agree = []
            for t in range(max(ages), len(frames)):
                for box in boxes:
                    small = flow.small_box(box)
                    start = time.perf_counter()
                    result = flow.estimate(crop(greys[t], small), crop(greys[t - age], small))
                    warped = flow.warp_labels(np.ascontiguousarray(crop(labels[t - age], box)), result)
                    times.append(time.perf_counter() - start)
                    agree.append(float((warped == crop(labels[t], box)).mean()))
            row[f"agreement_age_{age}"] = float(np.mean(agree))
        row["ms_per_region"] = 1000 * float(np.mean(times))
        rows.append(row)
    return rows
