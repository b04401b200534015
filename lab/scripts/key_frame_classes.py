"""What keeps a key frame's metric short of the stride's 0.825 when it arrives
(docs/results/accuracy_diagnosis.md).

Runs P-8 (the paper's parameters, the labels teacher) over each scene and records, for every key frame,
the labels the edge's student gave it *before* its own update (the score Algorithm 2 would need to be
high for the stride to grow without help from distillation): IoU per class, the classes it shows that
the frame lacks (hallucinated, IoU 0 in eq. 1) and each class's share of the frame. Prints the metric,
the metric over the frame's own classes, and over its classes of at least ``--min-pixels`` pixels.

Usage: ``python lab/scripts/key_frame_classes.py --scenes DIR... [--student PT] --out FILE.json``
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

from shadowtutor.algorithms.client_loop import ClientLoop, FrameResult
from shadowtutor.algorithms.metrics import miou
from shadowtutor.classes import LVS_CLASSES, background_index
from shadowtutor.models.pretrained import default_student_path
from shadowtutor.scene_store import Scene
from shadowtutor_lab.evaluation.passes import ScenePass, run_pass

BACKGROUND = background_index(LVS_CLASSES)


def key_frame_record(result: FrameResult, truth: np.ndarray) -> dict[str, Any]:
    pred = np.asarray(result.labels)
    present = {int(c) for c in np.unique(truth)}
    shown = {int(c) for c in np.unique(pred)}
    ious = {c: float(np.logical_and(pred == c, truth == c).sum() / np.logical_or(pred == c, truth == c).sum())
            for c in sorted(present | shown)}
    return {"frame": result.index, "metric": miou(pred, truth, len(LVS_CLASSES)), "ious": ious,
            "pixels": {c: int((truth == c).sum()) for c in sorted(present)}, "hallucinated": sorted(shown - present)}


def metric_over(record: dict[str, Any], min_pixels: int | None) -> float:
    """Eq. 1 over all classes (None), or over the frame's classes of at least ``min_pixels`` (and background)."""
    if min_pixels is None:
        return record["metric"]
    kept = [c for c, n in record["pixels"].items() if n >= min_pixels or c == BACKGROUND]
    return float(np.mean([record["ious"][c] for c in kept]))


def run_scene(scene_dir: Path, student: Path) -> list[dict[str, Any]]:
    scene = Scene.open(scene_dir)
    records: list[dict[str, Any]] = []
    process = ClientLoop.process

    def observed(loop: ClientLoop, frame: np.ndarray) -> FrameResult:
        result = process(loop, frame)
        if result.is_key_frame:
            records.append(key_frame_record(result, scene.label(result.index)))
        return result

    ClientLoop.process = observed  # type: ignore[method-assign]
    try:
        run_pass(ScenePass(scene_dir.name, scene_dir, ("p8",), scene.meta.frames, None, student, backend="onnx",
                           threads=1))
    finally:
        ClientLoop.process = process  # type: ignore[method-assign]
    return records


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scenes", type=Path, nargs="+", required=True)
    parser.add_argument("--student", type=Path, default=None, help="default: the packaged student")
    parser.add_argument("--min-pixels", type=int, nargs="+", default=[230, 1000])
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    student = args.student or default_student_path()
    out: dict[str, Any] = {"student": str(student), "scenes": {}}
    for scene_dir in args.scenes:
        records = run_scene(scene_dir, student)
        frame_pixels = sum(records[0]["pixels"].values())
        by_class: dict[str, list[float]] = {}
        for r in records:
            for c in r["pixels"]:
                by_class.setdefault(LVS_CLASSES[c], []).append(r["ious"][c])
        summary: dict[str, Any] = {
            "key_frames": len(records),
            "hallucinated_classes_per_key_frame": float(np.mean([len(r["hallucinated"]) for r in records])),
            "iou_on_arrival": {name: float(np.mean(v)) for name, v in by_class.items()},
            "share_of_frame": {LVS_CLASSES[c]: float(np.mean([r["pixels"].get(c, 0) for r in records]) / frame_pixels)
                               for c in sorted({c for r in records for c in r["pixels"]}) if c != BACKGROUND},
        }
        for label, limit in [("all classes (eq. 1)", None), ("the frame's classes", 0),
                             *[(f"the frame's classes of >= {n} px", n) for n in args.min_pixels]]:
            metrics = np.array([metric_over(r, limit) for r in records])
            summary[label] = {"mean": float(metrics.mean()), "at_least_0.825": float((metrics >= 0.825).mean())}
            print(f"{scene_dir.name}: over {label}: mean {metrics.mean():.3f}, "
                  f"{100 * (metrics >= 0.825).mean():.0f} % of key frames at >= 0.825")
        print(f"{scene_dir.name}: IoU on arrival " + ", ".join(f"{k} {v:.2f}" for k, v in
                                                                summary["iou_on_arrival"].items()))
        out["scenes"][scene_dir.name] = {"summary": summary, "key_frames": records}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
