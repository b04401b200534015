"""Why the student rarely reaches THRESHOLD on generated scenes: the measurements behind
docs/results/accuracy_diagnosis.md.

1. ``wild``: the pre-trained student alone on every ``--every``-th frame of each scene, at each
   ``--sizes``: per-class IoU over all sampled frames, the per-frame mIoU as Algorithm 1 computes it,
   and the share of each class's pixels labelled right by object size (connected regions of the
   label map, area as a share of the frame).
2. ``distill``: Algorithm 1 from the pre-trained student on single key frames (every
   ``--key-every``-th frame), THRESHOLD out of reach so every step is taken, for each learning rate and
   size: the metric after each step (partial distillation, no rollback), the share of key frames
   passing 0.8, and the per-class IoU after MAX_UPDATES (8) steps.

Both also count the classes a prediction shows that the frame's label lacks: each adds an IoU of 0
to the frame's mIoU (eq. 1 counts classes present in the prediction or the label).

Usage: ``python lab/scripts/diagnose_accuracy.py --scenes DIR... --out FILE.json``
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import platform
import sys
import time
from pathlib import Path

import cv2
import numpy as np
import torch

from shadowtutor.algorithms.loss import key_frame_weights, weighted_cross_entropy
from shadowtutor.algorithms.metrics import miou
from shadowtutor.algorithms.params import AlgorithmParams
from shadowtutor.classes import LVS_CLASSES, background_index
from shadowtutor.models.checkpoint import load_student
from shadowtutor.models.pretrained import default_student_path
from shadowtutor.models.student import normalise_frame
from shadowtutor.scene_store import Scene
from shadowtutor_lab.cli.options import script_command

BACKGROUND = background_index(LVS_CLASSES)
NUM = len(LVS_CLASSES)
SIZE_BINS = (0.0, 0.002, 0.01, 0.05, 1.01)  # region area as a share of the frame
PAPER = AlgorithmParams()


def confusion(pred: np.ndarray, label: np.ndarray) -> np.ndarray:
    return np.bincount(label.ravel().astype(np.int64) * NUM + pred.ravel(), minlength=NUM * NUM).reshape(NUM, NUM)


def class_iou(conf: np.ndarray) -> dict[str, float | None]:
    inter = np.diag(conf)
    union = conf.sum(0) + conf.sum(1) - inter
    return {n: (float(inter[c] / union[c]) if union[c] else None) for c, n in enumerate(LVS_CLASSES)}


def size_recall(pred: np.ndarray, label: np.ndarray, hits: np.ndarray, totals: np.ndarray) -> None:
    """Add each object region's right pixels and pixels to its size bin."""
    area = label.size
    for c in range(NUM):
        if c == BACKGROUND:
            continue
        count, regions, stats, _ = cv2.connectedComponentsWithStats((label == c).astype(np.uint8), connectivity=8)
        for r in range(1, count):
            b = np.searchsorted(SIZE_BINS, stats[r, cv2.CC_STAT_AREA] / area, side="right") - 1
            mask = regions == r
            hits[b] += int((pred[mask] == c).sum())
            totals[b] += int(mask.sum())


def frame_terms(pred: np.ndarray, label: np.ndarray) -> tuple[int, float]:
    """Classes the prediction shows that the label lacks (each adds an IoU of 0 to the frame's mIoU),
    and the frame's mIoU over the label's classes only."""
    shown, present = set(np.unique(pred).tolist()), set(np.unique(label).tolist())
    conf = confusion(pred, label)
    inter, union = np.diag(conf), conf.sum(0) + conf.sum(1) - np.diag(conf)
    return len(shown - present), float(np.mean([inter[c] / union[c] for c in present]))


def predict(model: torch.nn.Module, frame: np.ndarray) -> np.ndarray:
    with torch.inference_mode():
        return model(normalise_frame(frame)).argmax(1)[0].numpy()


def wild(scenes: list[Scene], student_path: Path, size: tuple[int, int], every: int) -> dict:
    model = load_student(student_path).model.eval()
    conf = np.zeros((NUM, NUM), np.int64)
    per_frame, hits, totals = [], np.zeros(len(SIZE_BINS) - 1), np.zeros(len(SIZE_BINS) - 1)
    extra, label_only = [], []
    pixel_share = np.zeros(NUM)
    for scene in scenes:
        for index, frame in enumerate(scene.frames(size)):
            if index % every:
                continue
            label = scene.label(index, size)
            pred = predict(model, frame)
            conf += confusion(pred, label)
            per_frame.append(miou(pred, label, NUM))
            terms = frame_terms(pred, label)
            extra.append(terms[0])
            label_only.append(terms[1])
            size_recall(pred, label, hits, totals)
            pixel_share += np.bincount(label.ravel(), minlength=NUM)
    return {
        "size": f"{size[0]}x{size[1]}",
        "frames": len(per_frame),
        "mean_frame_miou": float(np.mean(per_frame)),
        "frames_at_or_above_threshold": float(np.mean(np.array(per_frame) >= PAPER.threshold)),
        "mean_classes_shown_but_absent": float(np.mean(extra)),
        "mean_frame_miou_over_label_classes": float(np.mean(label_only)),
        "class_iou": class_iou(conf),
        "class_pixel_share": {n: float(pixel_share[c] / pixel_share.sum()) for c, n in enumerate(LVS_CLASSES)},
        "recall_by_region_size": [
            {"area_share": [SIZE_BINS[b], min(SIZE_BINS[b + 1], 1.0)], "pixels": int(totals[b]),
             "recall": float(hits[b] / totals[b]) if totals[b] else None}
            for b in range(len(SIZE_BINS) - 1)
        ],
    }


def distill(scenes: list[Scene], student_path: Path, size: tuple[int, int], lr: float, key_every: int,
            steps: int) -> dict:
    curves, conf8, extra, label_only = [], np.zeros((NUM, NUM), np.int64), [], []
    for scene in scenes:
        for index, frame in enumerate(scene.frames(size)):
            if index % key_every:
                continue
            label = scene.label(index, size)
            model = load_student(student_path).model.train()
            optimizer = torch.optim.Adam(model.set_trainable("partial"), lr=lr)
            x, target = normalise_frame(frame), torch.from_numpy(label).long()
            weights = torch.from_numpy(key_frame_weights(label, None, BACKGROUND, PAPER))
            logits = model(x)
            curve = [miou(logits.argmax(1)[0], target, NUM)]
            for step in range(steps):  # Algorithm 1's steps, THRESHOLD out of reach
                loss = weighted_cross_entropy(logits, target, weights)
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()
                logits = model(x)
                curve.append(miou(logits.argmax(1)[0], target, NUM))
                if step + 1 == PAPER.max_updates:
                    pred = logits.argmax(1)[0].numpy()
                    conf8 += confusion(pred, label)
                    terms = frame_terms(pred, label)
                    extra.append(terms[0])
                    label_only.append(terms[1])
            curves.append(curve)
    arr = np.array(curves)
    reach = [int(np.argmax(c >= PAPER.threshold)) if (c >= PAPER.threshold).any() else None for c in arr]
    return {
        "size": f"{size[0]}x{size[1]}", "learning_rate": lr, "key_frames": len(curves),
        "mean_metric_by_step": arr.mean(0).round(4).tolist(),
        "share_reaching_threshold_within_max_updates": float(np.mean([r is not None and r <= 8 for r in reach])),
        f"share_reaching_threshold_within_{steps}": float(np.mean([r is not None for r in reach])),
        "class_iou_after_max_updates": class_iou(conf8),
        "mean_classes_shown_but_absent_after_max_updates": float(np.mean(extra)),
        "mean_miou_over_label_classes_after_max_updates": float(np.mean(label_only)),
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--scenes", nargs="+", type=Path, required=True)
    p.add_argument("--student", type=Path, default=None)
    p.add_argument("--sizes", nargs="+", default=["320x180", "640x360"])
    p.add_argument("--every", type=int, default=10)
    p.add_argument("--key-every", type=int, default=100)
    p.add_argument("--steps", type=int, default=16)
    p.add_argument("--learning-rates", nargs="+", type=float, default=[0.003, 0.01, 0.03])
    p.add_argument("--parts", nargs="+", choices=("wild", "distill"), default=["wild", "distill"])
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args()
    torch.set_num_threads(1)
    student = args.student or default_student_path()
    scenes = [Scene.open(s) for s in args.scenes]
    sizes = [tuple(int(v) for v in s.split("x")) for s in args.sizes]
    start = time.perf_counter()
    result = {
        "command": script_command(__file__, sys.argv[1:]),
        "student": str(student), "scenes": [dataclasses.asdict(s.meta) | {"dir": str(s.directory)} for s in scenes],
        "machine": f"{platform.processor() or platform.machine()}, torch {torch.__version__}, 1 thread",
        "wild": [wild(scenes, student, size, args.every) for size in sizes] if "wild" in args.parts else [],
        "distill": [distill(scenes, student, size, lr, args.key_every, args.steps)
                    for size in sizes for lr in (args.learning_rates if size == sizes[0] else [PAPER.learning_rate])]
        if "distill" in args.parts else [],
    }
    result["seconds"] = time.perf_counter() - start
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k not in ("scenes",)}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
