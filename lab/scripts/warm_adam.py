"""Does a session's Adam started from moments of the pre-training data make Algorithm 1's first steps
less destructive? (docs/results/accuracy_diagnosis.md, "Next steps" 1.)

Adam's moments are estimated at the packaged student's weights, in Adam's own code with a learning rate
of 0 (the weights do not move), over ``--samples`` frames of pre-training scenes (seeds >= 1000, both
pre-training sizes). Then on every ``--key-every``-th frame of each scene, from the packaged student:
Algorithm 1's steps (partial distillation, the paper's learning rate, THRESHOLD out of reach so every
step is taken) with a fresh Adam and with the warm one; the metric (eq. 1) after each step.

Usage: ``python lab/scripts/warm_adam.py --scenes DIR... --out FILE.json``
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

from shadowtutor.algorithms.loss import key_frame_weights, object_weight_map, weighted_cross_entropy
from shadowtutor.algorithms.metrics import miou
from shadowtutor.algorithms.params import AlgorithmParams
from shadowtutor.classes import LVS_CLASSES, background_index
from shadowtutor.models.checkpoint import load_student
from shadowtutor.models.pretrained import default_student_path
from shadowtutor.models.student import StudentNet, normalise_frame
from shadowtutor.scene_store import Scene
from shadowtutor_lab.evaluation.pretrain import load_scene_samples
from shadowtutor_lab.evaluation.pretrain_config import PretrainConfig

BACKGROUND = background_index(LVS_CLASSES)
NUM = len(LVS_CLASSES)
PAPER = AlgorithmParams()
AdamState = dict[str, dict[str, torch.Tensor]]


def pretraining_moments(samples: int, work_dir: Path) -> AdamState:
    """Adam's state per parameter name after ``samples`` pre-training frames at the packaged weights."""
    config = PretrainConfig(scenes_per_preset=1, frames=50, sizes=((320, 180), (640, 360)), seed=1100)
    frames = load_scene_samples(work_dir, config, progress=False)
    model = load_student(default_student_path()).model.train()
    optimizer = torch.optim.Adam(model.set_trainable("full"), lr=0.0)
    for index in np.random.default_rng(0).permutation(len(frames))[:samples]:
        frame, label = frames[index]
        logits = model(normalise_frame(np.ascontiguousarray(frame)))
        loss = weighted_cross_entropy(logits, torch.from_numpy(label).long(),
                                      torch.from_numpy(object_weight_map(label, BACKGROUND)))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    return {name: optimizer.state[p] for name, p in model.named_parameters()}


def steps_from(frame: np.ndarray, label: np.ndarray, moments: AdamState | None) -> list[float]:
    model: StudentNet = load_student(default_student_path()).model.train()
    trainable = model.set_trainable("partial")
    optimizer = torch.optim.Adam(trainable, lr=PAPER.learning_rate)
    if moments is not None:
        names = {id(p): name for name, p in model.named_parameters()}
        for p in trainable:
            optimizer.state[p] = copy.deepcopy(moments[names[id(p)]])
    x, target = normalise_frame(frame), torch.from_numpy(label).long()
    weights = torch.from_numpy(key_frame_weights(label, None, BACKGROUND, PAPER))
    with torch.no_grad():
        front = model.forward_front(x).detached()
    logits = model.forward_back(front)
    curve = [miou(logits.argmax(1)[0], target, NUM)]
    for _ in range(PAPER.max_updates):
        loss = weighted_cross_entropy(logits, target, weights)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        logits = model.forward_back(front)
        curve.append(miou(logits.argmax(1)[0], target, NUM))
    return curve


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--scenes", nargs="+", type=Path, required=True)
    p.add_argument("--samples", type=int, default=300, help="pre-training frames the moments are estimated on")
    p.add_argument("--key-every", type=int, default=50)
    p.add_argument("--work", type=Path, default=Path(".cache/pretrain-work"), help="pre-training scene cache")
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args()
    torch.set_num_threads(1)
    start = time.perf_counter()
    moments = pretraining_moments(args.samples, args.work)
    curves: dict[str, list[list[float]]] = {"cold": [], "warm": []}
    for directory in args.scenes:
        scene = Scene.open(directory)
        for index, frame in enumerate(scene.frames()):
            if index % args.key_every == 0:
                label = scene.label(index)
                curves["cold"].append(steps_from(frame, label, None))
                curves["warm"].append(steps_from(frame, label, moments))
    result = {
        "command": " ".join(["python", *sys.argv]), "student": str(default_student_path()),
        "key_frames": len(curves["cold"]), "samples": args.samples, "torch": torch.__version__,
        **{f"mean_metric_by_step_{k}": np.mean(v, axis=0).round(4).tolist() for k, v in curves.items()},
        **{f"share_passing_threshold_{k}": float((np.array(v)[:, 1:] > PAPER.threshold).any(1).mean())
           for k, v in curves.items()},
        "seconds": time.perf_counter() - start,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
