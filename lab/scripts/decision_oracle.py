"""How much could *any* decision rule gain over a fixed key interval? Oracles read the truth.

An oracle policy knows, before choosing, the true cost of warping the current frame: it warps
every region from its key exactly as the labeller would and measures the result against the
scene's truth ("truth": pixel accuracy of the segmentation path minus the flow path's, the most
a perfect truth-target network could know) or against the student's own labels ("agreement":
1 - agreement, DVSNet's target). It then holds that cost, summed since the key, within a budget
(:class:`~shadowtutor.acceleration.regions.labeller.BudgetPolicy`'s rule), or, DVSNet's rule with a
perfect network, warps while the agreement reaches a threshold (``--agreement-thresholds``). Compared with the
fixed intervals at the same fraction of segmented frames (linear interpolation), offline: student
labels are computed once per frame, so only equal work is compared, not speed.

    python lab/scripts/decision_oracle.py --presets patrol-street moving-street --seeds 21 --frames 300 \\
        --out docs/results/regions/decision_oracle.json
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

import cv2
import numpy as np
import torch

from shadowtutor.acceleration.regions.labeller import FLOW, FixedIntervalPolicy, KeyFlows, RegionKey, RegionLabeller
from shadowtutor.algorithms.metrics import miou
from shadowtutor.models.inference import build_inference_backend
from shadowtutor.models.pretrained import load_default_student
from shadowtutor.scene_store import Scene
from shadowtutor_lab.cli.options import script_command
from shadowtutor_lab.scenes.cache import cached_scene


class OraclePolicy:
    """A rule on the true cost of warping now (see the module docstring): the frame is warped while the
    cost summed since the key stays within ``budget`` or, with ``per_frame``, while this frame's cost does."""

    needs_flow = True

    def __init__(self, budget: float, target: str, frames: list[np.ndarray], truth: list[np.ndarray],
                 student: list[np.ndarray], per_frame: bool = False) -> None:
        self.budget, self.target, self.per_frame = budget, target, per_frame
        self.frames, self.truth, self.student = frames, truth, student
        self.labeller: RegionLabeller | None = None

    def due(self, keys: Sequence[RegionKey]) -> np.ndarray:
        if self.per_frame:  # DVSNet's rule looks at the frame itself, never ahead
            return np.zeros(len(keys), dtype=bool)
        return np.array([key.spent + key.last_loss > self.budget for key in keys], dtype=bool)

    def take_flow(self, features: np.ndarray, ages: np.ndarray, spent: np.ndarray,
                  together: bool) -> tuple[np.ndarray, np.ndarray]:
        labeller = self.labeller
        assert labeller is not None and labeller.grid is not None and together
        t = labeller.frame_index - 1
        flows = KeyFlows(labeller.flow, labeller.flow.small_grey(self.frames[t]))
        warped = np.empty_like(self.truth[t])
        for key, box in zip(labeller.keys, labeller.grid.boxes, strict=True):
            assert key is not None
            warped[box[1]:box[3], box[0]:box[2]] = flows.warped_labels(key)
        if self.target == "truth":
            loss = max(0.0, float((self.student[t] == self.truth[t]).mean() - (warped == self.truth[t]).mean()))
        else:
            loss = 1.0 - float((warped == self.student[t]).mean())
        scores = np.full(len(features), 1.0 - loss, dtype=np.float32)
        return np.full(len(features), (0.0 if self.per_frame else float(spent.mean())) + loss <= self.budget), scores


Labelled = tuple[list[np.ndarray], list[np.ndarray], list[np.ndarray], int]


def labelled_scenes(args: argparse.Namespace) -> Iterator[Labelled]:
    """Per preset and seed of ``args`` (1 thread): the frames, their truth, the student's labels, the class count."""
    torch.set_num_threads(1)
    cv2.setNumThreads(1)
    student = load_default_student()
    backend = build_inference_backend("onnx", student.model)
    for preset in args.presets:
        for seed in args.seeds:
            scene = Scene.open(cached_scene(preset, args.frames, seed, (640, 360), progress=False))
            frames = list(scene.frames())
            yield frames, list(scene.labels()), [backend.infer(frame) for frame in frames], student.model.num_classes
            print(f"{preset} seed {seed} done", flush=True)


def run(args: argparse.Namespace) -> dict:
    rows: dict[str, list[tuple[float, float]]] = {}
    for frames, truth, labels, classes in labelled_scenes(args):
        policies: dict[str, tuple[object, int]] = {
            f"fixed@{k}": (FixedIntervalPolicy(k), k) for k in args.intervals}
        for target, budgets in (("truth", args.truth_budgets), ("agreement", args.agreement_budgets)):
            policies |= {f"oracle-{target}@{b:g}": (OraclePolicy(b, target, frames, truth, labels), args.max_age)
                         for b in budgets}
        policies |= {f"oracle-agreement-threshold@{t:g}": (
            OraclePolicy(1.0 - t, "agreement", frames, truth, labels, per_frame=True), args.max_age)
            for t in args.agreement_thresholds}
        for name, (policy, max_age) in policies.items():
            now = [0]
            labeller = RegionLabeller(lambda _frame, now=now, labels=labels: labels[now[0]],
                                      policy, 4, max_key_age=max_age)  # type: ignore[arg-type]
            if isinstance(policy, OraclePolicy):
                policy.labeller = labeller
            scores, segmented = [], 0
            for t, frame in enumerate(frames):
                now[0] = t
                out = labeller.label(frame)
                segmented += labeller.last.paths[0] != FLOW  # type: ignore[union-attr]
                scores.append(miou(out, truth[t], classes))
            rows.setdefault(name, []).append((float(np.mean(scores)), segmented / len(frames)))
    return {"command": script_command(__file__, sys.argv[1:]), "presets": args.presets, "seeds": args.seeds,
            "frames": args.frames, "summary": against_fixed(rows, args.intervals)}


def against_fixed(rows: dict[str, list[tuple[float, float]]], intervals: Sequence[int]) -> dict[str, dict]:
    """Per schedule, the mean of its ``(mIoU, segmented fraction)`` over scenes and its mIoU points against the
    fixed intervals ``fixed@K`` (in ``rows``) at the same segmented fraction (None outside their range)."""
    summary = {name: {"miou": float(np.mean([m for m, _ in v])), "segmented": float(np.mean([s for _, s in v]))}
               for name, v in rows.items()}
    fixed = sorted((summary[f"fixed@{k}"]["segmented"], summary[f"fixed@{k}"]["miou"]) for k in intervals)
    for row in summary.values():
        inside = fixed[0][0] <= row["segmented"] <= fixed[-1][0]
        row["vs_fixed_points"] = (100 * (row["miou"] - float(np.interp(row["segmented"], *zip(*fixed, strict=True))))
                                  if inside else None)
    return summary


def add_scene_arguments(p: argparse.ArgumentParser, max_age: int) -> None:
    """The scenes and the fixed intervals compared (shared with ``schedule_bound.py``)."""
    p.add_argument("--presets", nargs="+", required=True)
    p.add_argument("--seeds", nargs="+", type=int, required=True)
    p.add_argument("--frames", type=int, default=300)
    p.add_argument("--intervals", nargs="+", type=int, default=[2, 3, 4, 5, 6])
    p.add_argument("--max-age", type=int, default=max_age)
    p.add_argument("--out", type=Path, required=True)


def write_summary(result: dict, out: Path) -> None:
    out.write_text(json.dumps(result, indent=2) + "\n")
    for name, row in result["summary"].items():
        diff = "—" if row["vs_fixed_points"] is None else f"{row['vs_fixed_points']:+.2f}"
        print(f"{name:24s} mIoU {100 * row['miou']:6.2f}  segmented {100 * row['segmented']:5.1f} %  vs fixed {diff}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_scene_arguments(p, max_age=12)
    p.add_argument("--truth-budgets", nargs="+", type=float, default=[0.01, 0.02, 0.04, 0.08])
    p.add_argument("--agreement-budgets", nargs="+", type=float, default=[0.06, 0.1, 0.15, 0.25])
    p.add_argument("--agreement-thresholds", nargs="+", type=float, default=[],
                   help="DVSNet's rule with a perfect network: warp while the agreement reaches the threshold")
    args = p.parse_args()
    write_summary(run(args), args.out)


if __name__ == "__main__":
    main()
