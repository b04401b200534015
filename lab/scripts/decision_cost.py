"""What deciding costs: the mIoU points a decision rule must gain at equal work just to keep up.

A rule that picks each frame's path from the decision network pays for it on every frame it
decides: the network's features (flow residuals) and its call, and with DVSNet's rule (decide
after the flow) also the flow of every frame it then segments. Here the fixed key interval K is
timed, round-robin frame by frame as the regions bench does, against the *same* interval that
also pays for the decision and ignores it: the labels are the same (their mIoU, agreement and
warped fraction are checked), so the only difference is speed. Two ways of paying:
``paid-lookahead@K`` (features and call on every warped frame, a key's last frame known in
advance: the budget rule's best case) and ``paid-dvsnet@K`` (also the flow of the frame it
segments). The *break-even* is how many points the fixed-interval curve gains when slowed down
that much (it segments more often): a decision rule must be this much ahead at the same number
of student calls before it is ahead at the same FPS.

    python lab/scripts/decision_cost.py --presets moving-street moving-people moving-animals --seeds 31 \\
        --frames 300 --backend torch --out docs/results/regions/decision_cost_moving_torch.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import torch

from shadowtutor.acceleration.regions.decision import (
    DecisionNetwork,
    default_decision_network_path,
    load_decision_network,
)
from shadowtutor.acceleration.regions.labeller import FixedIntervalPolicy, RegionLabeller
from shadowtutor.models.inference import build_inference_backend
from shadowtutor.models.pretrained import load_default_student
from shadowtutor.scene_store import Scene
from shadowtutor_lab.cli.options import script_command
from shadowtutor_lab.evaluation.machine import machine_info
from shadowtutor_lab.regions import bench
from shadowtutor_lab.scenes.cache import cached_scene

PAYMENTS = {"lookahead": -1, "dvsnet": 0}  # max key age relative to K: -1 never computes a flow it will not use


class DecidingInterval(FixedIntervalPolicy):
    """The fixed interval that also computes the decision network's scores, and ignores them."""

    needs_flow = True

    def __init__(self, interval: int, network: DecisionNetwork) -> None:
        super().__init__(interval)
        self.network = network

    def take_flow(self, features: np.ndarray, ages: np.ndarray, spent: np.ndarray,
                  together: bool) -> tuple[np.ndarray, np.ndarray | None]:
        take, _ = super().take_flow(features, ages, spent, together)
        return take, self.network.scores(features)


def paid_name(interval: int, payment: str) -> str:
    """Not ``fixed@...``: the bench interpolates the fixed-interval curve over the names it starts."""
    return f"paid-{payment}@{interval}"


def labellers(segment: bench.Segment, network: DecisionNetwork, intervals: list[int],
              paid: list[int]) -> dict[str, RegionLabeller]:
    out = {f"fixed@{k}": RegionLabeller(segment, FixedIntervalPolicy(k), max_key_age=k) for k in intervals}
    for k in paid:
        for payment, age in PAYMENTS.items():
            out[paid_name(k, payment)] = RegionLabeller(segment, DecidingInterval(k, network), max_key_age=k + age)
    return out


def break_even(summary: dict[str, dict[str, Any]], paid: list[int]) -> dict[str, dict[str, float | None]]:
    """Per paid interval and payment: the speed lost and the fixed-interval points that speed is worth."""
    out = {}
    for k in paid:
        plain = summary[f"fixed@{k}"]
        for payment in PAYMENTS:
            row = summary[paid_name(k, payment)]
            if any(abs(row[key] - plain[key]) > 1e-9 for key in ("miou", "agreement", "flow_fraction")):
                raise AssertionError(f"{paid_name(k, payment)} labelled differently from fixed@{k}")
            same_speed = bench.fixed_interval_at(summary, row["speedup"])
            out[paid_name(k, payment)] = {
                "speed_lost": 1 - row["speedup"] / plain["speedup"],
                "break_even_points": None if same_speed is None else 100 * (same_speed - plain["miou"])}
    return out


def run(args: argparse.Namespace) -> dict[str, Any]:
    torch.set_num_threads(1)
    cv2.setNumThreads(1)
    student = load_default_student()
    backend = build_inference_backend(args.backend, student.model)
    network, _meta = load_decision_network(default_decision_network_path())
    clips = []
    for preset in args.presets:
        for seed in args.seeds:
            scene = Scene.open(cached_scene(preset, args.frames, seed, (640, 360), progress=False))
            clips.append(bench.time_labellers(scene.frames(), scene.labels(), backend.infer,
                                              labellers(backend.infer, network, args.intervals, args.paid),
                                              student.model.num_classes, warmup=3))
            print(f"{preset} seed {seed} done", flush=True)
    summary = bench.summarise(clips)
    return {"command": script_command(__file__, sys.argv[1:]), "machine": machine_info(), "backend": args.backend,
            "presets": args.presets, "seeds": args.seeds, "frames": args.frames, "summary": summary,
            "break_even": break_even(summary, args.paid)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--presets", nargs="+", required=True)
    p.add_argument("--seeds", nargs="+", type=int, required=True)
    p.add_argument("--frames", type=int, default=300)
    p.add_argument("--backend", choices=("torch", "onnx"), default="torch")
    p.add_argument("--intervals", nargs="+", type=int, default=[2, 3, 4, 5, 6])
    p.add_argument("--paid", nargs="+", type=int, default=[3, 4], help="intervals timed also paying for decisions")
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args()
    result = run(args)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    for name, row in result["summary"].items():
        print(f"{name:22s} mIoU {100 * row['miou']:6.2f}  speed-up {row['speedup']:.2f}x")
    for name, row in result["break_even"].items():
        points = row["break_even_points"]
        print(f"{name:22s} speed lost {100 * row['speed_lost']:4.1f} %  break-even "
              f"{'—' if points is None else f'{points:+.2f}'} points")


if __name__ == "__main__":
    main()
