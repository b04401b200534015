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

    python lab/scripts/schedule_bound.py --presets moving-street moving-people moving-animals --seeds 31 \\
        --frames 300 --out docs/results/regions/schedule_bound.json
"""

from __future__ import annotations

import argparse
import sys

import numpy as np
from decision_oracle import add_scene_arguments, against_fixed, labelled_scenes, write_summary

from shadowtutor.acceleration.regions.flow import FlowEstimator
from shadowtutor.algorithms.metrics import miou
from shadowtutor_lab.cli.options import script_command

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
    points: dict[str, list[tuple[float, float]]] = {}  # schedule -> (mIoU, segmented fraction) per scene
    for frames, truth, labels, classes in labelled_scenes(args):
        score, agreement = warp_scores(frames, truth, labels, classes, args.max_age)
        n = len(frames)
        for interval in args.intervals:
            keys = list(range(0, n, interval))
            points.setdefault(f"fixed@{interval}", []).append((mean_score(score, keys, n), len(keys) / n))
        for target, gain in (("truth", score), ("agreement", agreement)):
            for price in PRICES:
                keys = best_schedule(np.nan_to_num(gain, nan=-np.inf), price)
                points.setdefault(f"best-{target}@{price:g}", []).append((mean_score(score, keys, n), len(keys) / n))
    return {"command": script_command(__file__, sys.argv[1:]), "presets": args.presets, "seeds": args.seeds,
            "frames": args.frames, "max_age": args.max_age, "summary": against_fixed(points, args.intervals)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_scene_arguments(p, max_age=8)
    args = p.parse_args()
    write_summary(run(args), args.out)


if __name__ == "__main__":
    main()
