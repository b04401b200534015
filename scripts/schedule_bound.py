"""The best key schedule in hindsight: how much any decision rule could gain over a fixed key interval.

For every frame ``t`` and every key ``k`` at most ``--max-age`` frames before it, the frame's labels warped
from ``k`` (the flow path as the one-device labeller runs it: DIS over the whole frame, all regions sharing
the path) are scored against the scene's truth (per-frame mIoU, as the regions bench) and against the
student's own labels of ``t`` (DVSNet's target). A dynamic programme over (frame, last key) then finds, for
a price per student call, the schedule with the highest total score: swept over prices it traces the best
mIoU any rule reaches at each number of student calls, knowing every frame's cost in advance and paying
nothing to decide. ``truth``: the schedule that maximises the mIoU itself (no rule can do better at the
same number of calls); ``agreement``: the schedule that maximises agreement with the student (a perfect
predictor of DVSNet's target), scored against the truth. Both against the fixed intervals at the same
fraction of segmented frames (linear interpolation), offline, at equal work: speed is not compared.

    python scripts/schedule_bound.py --presets moving-street moving-people moving-animals --seeds 31 \\
        --frames 300 --out docs/results/regions/schedule_bound.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import cv2
import numpy as np
import torch

from shadowtutor.acceleration.regions.flow import FlowEstimator
from shadowtutor.algorithms.metrics import miou
from shadowtutor.models.inference import build_inference_backend
from shadowtutor.models.pretrained import load_default_student
from shadowtutor.scenes.cache import cached_scene
from shadowtutor.scenes.io import Scene

PRICES = (0.0, 0.002, 0.005, 0.01, 0.02, 0.03, 0.05, 0.08, 0.12, 0.2, 0.3, 0.5)


def warp_scores(frames: list[np.ndarray], truth: list[np.ndarray], student: list[np.ndarray], classes: int,
                max_age: int) -> tuple[np.ndarray, np.ndarray]:
    """``(score[k, age], agreement[k, age])``: frame ``k + age`` labelled from the key at ``k`` (age 0: segmented)."""
    flow = FlowEstimator()
    greys = [flow.small_grey(frame) for frame in frames]
    n = len(frames)
    score = np.full((n, max_age + 1), np.nan)
    agreement = np.full((n, max_age + 1), np.nan)
    for k in range(n):
        for age in range(max_age + 1):
            t = k + age
            if t >= n:
                break
            labels = student[k] if age == 0 else flow.warp_labels(student[k], flow.estimate(greys[t], greys[k]))
            score[k, age] = miou(labels, truth[t], classes)
            agreement[k, age] = float((labels == student[t]).mean())
    return score, agreement


def best_schedule(gain: np.ndarray, price: float) -> list[int]:
    """Key frames maximising ``sum(gain[key, age]) - price * keys``; frame 0 is a key."""
    n, width = gain.shape
    max_age = width - 1
    value = np.full((n, width), -np.inf)  # value[t, age]: best total up to t with t's key ``age`` frames back
    value[0, 0] = gain[0, 0] - price
    for t in range(1, n):
        value[t, 0] = value[t - 1].max() + gain[t, 0] - price
        for age in range(1, max_age + 1):
            if t - age >= 0:
                value[t, age] = value[t - 1, age - 1] + gain[t - age, age]
    keys, age = [], int(np.argmax(value[n - 1]))
    t = n - 1
    while t >= 0:  # walk back: the key of t is t - age; before it, the best state of t - age - 1
        key = t - age
        keys.append(key)
        t = key - 1
        if t >= 0:
            age = int(np.argmax(value[t]))
    return sorted(keys)


def mean_score(score: np.ndarray, keys: list[int], n: int) -> float:
    """Per-frame mIoU of the schedule ``keys`` (every frame from its last key)."""
    starts = np.searchsorted(keys, np.arange(n), side="right") - 1
    key_of = np.asarray(keys)[starts]
    return float(np.mean(score[key_of, np.arange(n) - key_of]))


def run(args: argparse.Namespace) -> dict:
    torch.set_num_threads(1)
    cv2.setNumThreads(1)
    student = load_default_student()
    backend = build_inference_backend("onnx", student.model)
    classes = student.model.num_classes
    points: dict[str, list[tuple[float, float]]] = {}  # schedule -> (segmented fraction, mIoU) per scene
    for preset in args.presets:
        for seed in args.seeds:
            scene = Scene.open(cached_scene(preset, args.frames, seed, (640, 360), progress=False))
            frames, truth = list(scene.frames()), list(scene.labels())
            labels = [backend.infer(frame) for frame in frames]
            score, agreement = warp_scores(frames, truth, labels, classes, args.max_age)
            n = len(frames)
            for interval in args.intervals:
                keys = list(range(0, n, interval))
                points.setdefault(f"fixed@{interval}", []).append((len(keys) / n, mean_score(score, keys, n)))
            for target, gain in (("truth", score), ("agreement", agreement)):
                for price in PRICES:
                    keys = best_schedule(np.nan_to_num(gain, nan=-np.inf), price)
                    points.setdefault(f"best-{target}@{price:g}", []).append((len(keys) / n,
                                                                              mean_score(score, keys, n)))
            print(f"{preset} seed {seed} done", flush=True)
    summary = {name: {"segmented": float(np.mean([s for s, _ in v])), "miou": float(np.mean([m for _, m in v]))}
               for name, v in points.items()}
    fixed = sorted((summary[f"fixed@{k}"]["segmented"], summary[f"fixed@{k}"]["miou"]) for k in args.intervals)
    for row in summary.values():
        inside = fixed[0][0] <= row["segmented"] <= fixed[-1][0]
        row["vs_fixed_points"] = (100 * (row["miou"] - float(np.interp(row["segmented"], *zip(*fixed, strict=True))))
                                  if inside else None)
    return {"command": "python scripts/schedule_bound.py " + " ".join(
                [f"--presets {' '.join(args.presets)}", f"--seeds {' '.join(map(str, args.seeds))}",
                 f"--frames {args.frames}", f"--max-age {args.max_age}", f"--out {args.out}"]),
            "presets": args.presets, "seeds": args.seeds, "frames": args.frames, "max_age": args.max_age,
            "summary": summary}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--presets", nargs="+", required=True)
    p.add_argument("--seeds", nargs="+", type=int, required=True)
    p.add_argument("--frames", type=int, default=300)
    p.add_argument("--intervals", nargs="+", type=int, default=[2, 3, 4, 5, 6])
    p.add_argument("--max-age", type=int, default=8)
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args()
    result = run(args)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    for name, row in result["summary"].items():
        diff = "—" if row["vs_fixed_points"] is None else f"{row['vs_fixed_points']:+.2f}"
        print(f"{name:24s} mIoU {100 * row['miou']:6.2f}  segmented {100 * row['segmented']:5.1f} %  vs fixed {diff}")


if __name__ == "__main__":
    main()
