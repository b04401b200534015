"""What training through the fused tail saves on the server: Algorithm 1 with the tail fused
(``Distiller(fuse_tail=True)``, the default) against the tail as written, on the same key frames.

Per scene, every ``--key-every``-th frame is a key frame, labelled by the scene's truth. Two sessions
start from the packaged student, one per tail, each going on from its own last student as a server
session does; each key frame goes through both in turn (round-robin, so load falls on both alike).
The paper's parameters, except THRESHOLD at 0.999 so that every one of MAX_UPDATES steps is taken and
timed. Reported: ms per step, and how alike the two sessions stay (the metric after each key frame,
the pixels the two students label alike).

Usage: ``python lab/scripts/distill_speed.py --scenes DIR... --out FILE.json`` (Markdown beside it)
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
from pathlib import Path

import numpy as np
import torch

from shadowtutor.algorithms.distill import Distiller
from shadowtutor.algorithms.params import AlgorithmParams
from shadowtutor.classes import LVS_CLASSES, background_index
from shadowtutor.models.pretrained import load_default_student
from shadowtutor.models.student import normalise_frame
from shadowtutor.scene_store import Scene
from shadowtutor_lab.cli.options import script_command
from shadowtutor_lab.evaluation.machine import machine_info

TAILS = {"fused": True, "as written": False}


def labels_of(distiller: Distiller, frame: np.ndarray) -> np.ndarray:
    with torch.no_grad():
        return distiller.student(normalise_frame(frame)).argmax(1)[0].numpy()


def run_scene(directory: Path, key_every: int, params: AlgorithmParams) -> dict:
    scene = Scene.open(directory)
    student = load_default_student().model
    background = background_index(LVS_CLASSES)
    sessions = {name: Distiller(copy.deepcopy(student), params, background, fuse_tail=fuse)
                for name, fuse in TAILS.items()}
    steps_ms: dict[str, list[float]] = {name: [] for name in TAILS}
    metrics: dict[str, list[float]] = {name: [] for name in TAILS}
    agreement = []
    for index, frame in enumerate(scene.frames()):
        if index % key_every:
            continue
        label = scene.label(index)
        for name, distiller in sessions.items():
            result = distiller.train(frame, label)
            steps_ms[name].extend(1000.0 * s for s in result.step_seconds)
            metrics[name].append(result.metric)
        fused, plain = (labels_of(sessions[name], frame) for name in ("fused", "as written"))
        agreement.append(float(np.mean(fused == plain)))
    width, height = scene.meta.size
    return {
        "scene": directory.name, "size": f"{width}x{height}", "key_frames": len(agreement),
        "step_ms": {name: float(np.mean(values)) for name, values in steps_ms.items()},
        "steps": {name: len(values) for name, values in steps_ms.items()},
        "mean_metric": {name: float(np.mean(values)) for name, values in metrics.items()},
        "largest_metric_gap": float(np.max(np.abs(np.subtract(metrics["fused"], metrics["as written"])))),
        "label_agreement": float(np.mean(agreement)),
    }


def render(results: dict) -> str:
    machine = results["machine"]
    lines = [
        "# Distillation through the fused tail",
        "",
        f"Machine: {machine.get('cpu_model', '?')}, {machine.get('cpu_count', '?')} CPUs, "
        f"torch {machine.get('torch')}, "
        f"{results['threads']} thread(s); CPU only. Partial distillation, the paper's parameters but THRESHOLD "
        f"{results['threshold']} (every step taken).",
        "",
        "```",
        results["command"],
        "```",
        "",
        "| scene | size | key frames | ms per step, tail as written | ms per step, fused | speed-up | "
        "mean metric after, as written / fused | largest gap on one key frame | pixels the students label alike (%) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for run in results["runs"]:
        slow, fast = run["step_ms"]["as written"], run["step_ms"]["fused"]
        lines.append(
            f"| {run['scene']} | {run['size']} | {run['key_frames']} | {slow:.1f} | {fast:.1f} | {slow / fast:.2f}x | "
            f"{run['mean_metric']['as written']:.4f} / {run['mean_metric']['fused']:.4f} | "
            f"{run['largest_metric_gap']:.4f} | {100 * run['label_agreement']:.2f} |")
    lines += ["", "Both sessions take the same number of steps (every one); they drift apart only by float rounding,",
              "which Adam amplifies on parameters the output does not depend on (biases before a normalisation)."]
    if results["notes"]:
        lines += ["", *[f"- {note}" for note in results["notes"]]]
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scenes", type=Path, nargs="+", required=True, help="generated scenes (truth = teacher)")
    parser.add_argument("--key-every", type=int, default=30, help="a key frame every N frames (default 30)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", type=Path, required=True, help="results JSON; the Markdown goes beside it")
    parser.add_argument("--note", action="append", default=[], help="a note for the Markdown (repeatable)")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    params = AlgorithmParams(threshold=0.999)
    runs = [run_scene(directory, args.key_every, params) for directory in args.scenes]
    results = {"runs": runs, "threads": args.threads, "threshold": params.threshold, "machine": machine_info(),
               "command": script_command(__file__, argv), "notes": args.note}
    args.out.write_text(json.dumps(results, indent=1) + "\n")
    args.out.with_suffix(".md").write_text(render(results))
    print(render(results))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
