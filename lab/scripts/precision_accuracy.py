"""P-1 and P-8 of the accuracy harness at two training precisions over the same scenes, in one invocation.

For every scene directory and every ``--precisions`` value this runs the harness's P-1+P-8 pass
(:class:`~shadowtutor_lab.evaluation.passes.ScenePass`, the server's ``Distiller`` at that precision, the edge's
student as ``bench accuracy`` runs it), in ``--jobs`` worker processes, and writes ``OUT/precision_accuracy.json``
and ``OUT/precision_accuracy.md``: per scene the mIoU (%) of each precision and the difference from the first,
and the means over the scenes with training backgrounds and, apart, over those with held-out ones
(``scenes make --backgrounds held-out``). A group holds when the mean P-8 of every other precision is within
``--tolerance`` points of the first's.

Usage: ``python lab/scripts/precision_accuracy.py --scenes DIR... --out DIR [--precisions fp32 bf16]
[--frames N] [--size WxH] [--jobs 2] [--threads 1] [--tolerance 0.5]``
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from shadowtutor.models.inference import onnx_available
from shadowtutor.models.precision import TRAINING_PRECISIONS, TrainingPrecision
from shadowtutor.models.pretrained import default_student_path
from shadowtutor.scene_store import Scene
from shadowtutor_lab.cli.options import frame_size, positive_int, script_command
from shadowtutor_lab.evaluation.harness import SceneEvaluation
from shadowtutor_lab.evaluation.machine import describe_machine, machine_info
from shadowtutor_lab.evaluation.passes import ScenePass, run_passes

SETTINGS = ("p1", "p8")
GROUPS = {"training": "training backgrounds", "held-out": "held-out backgrounds"}


def scene_row(evaluation: SceneEvaluation) -> dict[str, float]:
    """P-1 and P-8 mIoU (%) over every frame of one scene's pass, and P-8's mean steps per key frame."""
    records = evaluation.traces["p8"].records
    return {
        **{f"{key}_miou": 100.0 * statistics.fmean(evaluation.traces[key].miou) for key in SETTINGS},
        "p8_key_frames": float(len(evaluation.traces["p8"].key_frames)),
        "p8_mean_steps": statistics.fmean(r.steps for r in records) if records else 0.0,
    }


def compare(rows: dict[str, dict[str, dict[str, float]]], groups: dict[str, str], precisions: Sequence[str],
            tolerance: float) -> dict[str, Any]:
    """Per group of scenes (``groups``: scene name -> group), the mean of each precision's figures over its scenes,
    each later precision's mean P-1 and P-8 less the first's, and whether every P-8 difference is within
    ``tolerance`` points. ``rows``: precision -> scene -> :func:`scene_row`."""
    reference = precisions[0]
    summary: dict[str, Any] = {}
    for group in dict.fromkeys(groups.values()):
        names = [name for name, g in groups.items() if g == group]
        means = {p: {key: statistics.fmean(rows[p][n][key] for n in names) for key in rows[p][names[0]]}
                 for p in precisions}
        differences = {p: {key: means[p][key] - means[reference][key] for key in ("p1_miou", "p8_miou")}
                       for p in precisions[1:]}
        summary[group] = {
            "scenes": names, "means": means, "differences": differences,
            "holds": all(abs(d["p8_miou"]) <= tolerance for d in differences.values()),
        }
    return summary


def markdown(result: dict[str, Any]) -> str:
    """The report of :func:`main`'s ``result`` as Markdown."""
    precisions, reference = result["precisions"], result["precisions"][0]
    lines = [
        "# P-1 and P-8 by training precision", "",
        f"{result['frames']} frames of each scene at {result['size']}; the packaged student; teacher `labels`; "
        f"{result['jobs']} worker process(es), {result['threads']} torch thread(s) each.",
        f"Machine: {result['machine']}. Wall time: {result['wall_seconds']:.0f} s.", "",
        "Command:", "", "```", result["command"], "```", "",
    ]
    head = ["Scene", "Backgrounds"] + [f"{k} {p}" for p in precisions for k in ("P-1", "P-8")]
    head += [f"P-8 {p} - {reference}" for p in precisions[1:]]
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, group in result["groups"].items():
        cells = [name, group] + [f"{result['scenes'][p][name][k]:.2f}" for p in precisions
                                 for k in ("p1_miou", "p8_miou")]
        cells += [f"{result['scenes'][p][name]['p8_miou'] - result['scenes'][reference][name]['p8_miou']:+.2f}"
                  for p in precisions[1:]]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", f"Means per group (within {result['tolerance']} points of {reference} in P-8: holds or not):", ""]
    for group, summary in result["summary"].items():
        means = ", ".join(f"{p} P-1 {summary['means'][p]['p1_miou']:.2f} P-8 {summary['means'][p]['p8_miou']:.2f} "
                          f"(steps {summary['means'][p]['p8_mean_steps']:.2f})" for p in precisions)
        differences = ", ".join(f"{p} - {reference}: P-1 {d['p1_miou']:+.2f}, P-8 {d['p8_miou']:+.2f}"
                                for p, d in summary["differences"].items())
        verdict = "holds" if summary["holds"] else "does not hold"
        lines.append(f"- {group} ({len(summary['scenes'])} scenes): {means}; {differences}: **{verdict}**.")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scenes", nargs="+", type=Path, required=True, help="scene directories")
    parser.add_argument("--out", type=Path, required=True, help="output directory")
    parser.add_argument("--precisions", nargs="+", default=["fp32", "bf16"], choices=TRAINING_PRECISIONS,
                        help="training precisions, the first the reference (default fp32 bf16)")
    parser.add_argument("--frames", type=positive_int, help="first N frames of each scene (default: all)")
    parser.add_argument("--size", type=frame_size, help="run at WxH (default: each scene's size)")
    parser.add_argument("--jobs", type=positive_int, default=1, help="worker processes")
    parser.add_argument("--threads", type=positive_int, default=1, help="torch threads per worker")
    parser.add_argument("--tolerance", type=float, default=0.5, help="P-8 points a precision may differ by")
    args = parser.parse_args(argv)
    precisions: list[TrainingPrecision] = list(dict.fromkeys(args.precisions))
    if len(precisions) < 2:
        parser.error("give at least two distinct precisions")
    scenes = {path.resolve().name + ("@held-out" if Scene.open(path).meta.backgrounds == "held-out" else ""):
              Scene.open(path) for path in args.scenes}
    if len(scenes) != len(args.scenes):
        parser.error("two scenes have the same name and backgrounds")
    groups = {name: GROUPS.get(scene.meta.backgrounds, scene.meta.backgrounds) for name, scene in scenes.items()}
    student, backend = default_student_path(), "onnx" if onnx_available() else "torch"
    jobs = [ScenePass(name, scene.directory, SETTINGS, min(len(scene), args.frames or len(scene)), args.size,
                      student, backend=backend, threads=args.threads, precision=precision)
            for precision in precisions for name, scene in scenes.items()]
    started = time.perf_counter()
    rows: dict[str, dict[str, dict[str, float]]] = {p: {} for p in precisions}
    for job, evaluation in run_passes(jobs, args.jobs, args.threads, progress=False):
        rows[job.precision][job.name] = scene_row(evaluation)
        print(f"{job.precision} {job.name}: P-8 {rows[job.precision][job.name]['p8_miou']:.2f}", flush=True)
    result = {
        "command": script_command(__file__, sys.argv[1:] if argv is None else argv),
        "precisions": precisions, "frames": args.frames or "all",
        "size": "native" if args.size is None else f"{args.size[0]}x{args.size[1]}",
        "jobs": args.jobs, "threads": args.threads, "tolerance": args.tolerance,
        "machine": describe_machine(machine_info()), "wall_seconds": time.perf_counter() - started,
        "groups": groups, "scenes": rows, "summary": compare(rows, groups, precisions, args.tolerance),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "precision_accuracy.json").write_text(json.dumps(result, indent=2) + "\n")
    (args.out / "precision_accuracy.md").write_text(markdown(result))
    print(markdown(result))
    return 0 if all(s["holds"] for s in result["summary"].values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
