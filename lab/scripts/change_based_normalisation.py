"""What the change-based student's normalisation choice costs: the frame's exact statistics against statistics
frozen at the last full evaluation.

The student normalises every block's input with the frame's own per-channel mean and variance. The
change-based student keeps them exact (``BlockStage`` updates the sums from the changed positions), so when
they move, every position of the normalised map moves a little and the block's threshold decides which to
recompute. The alternative the issue names freezes them at the last full evaluation and refreshes them by a
full evaluation every ``R`` frames: positions that did not change then stay put, but the labels drift from
full-frame ones between refreshes. This study swaps ``BlockStage._normalisation`` for the frozen variant (a
study only: the product keeps exact statistics) and runs every frame change-based (no fallback), timed
round-robin with ``onnx`` and ``torch`` full-frame; agreement is with ``onnx``'s full-frame labels.

    python lab/scripts/change_based_normalisation.py --clip /root/.cache/shadowtutor/assets/clips/vtest.avi@300 \\
        --clip fixed-people:1 --frames 100 --refresh 10 30 --out docs/results/change_based/normalisation.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from shadowtutor.acceleration.change_based import stages
from shadowtutor.acceleration.change_based.backend import ChangeBasedBackend, ChangeBasedOptions
from shadowtutor.acceleration.change_based.runner import fused_tail_fits
from shadowtutor.acceleration.change_based.work import point_work, work_bound
from shadowtutor.models.inference import build_inference_backend
from shadowtutor.models.pretrained import load_default_student
from shadowtutor.models.student import StudentNet
from shadowtutor_lab.cli.options import script_command
from shadowtutor_lab.evaluation.clips import Clip, load_clip
from shadowtutor_lab.evaluation.machine import cpu_model

WARMUP = 2


@contextmanager
def frozen_statistics() -> Iterator[None]:
    """Blocks normalise with the statistics of their last full evaluation (exact ones are computed only then)."""
    exact_statistics = stages.BlockStage._normalisation

    def frozen(self: stages.BlockStage, exact: bool) -> tuple[torch.Tensor, torch.Tensor]:
        if exact or not hasattr(self, "frozen_normalisation"):
            self.frozen_normalisation = exact_statistics(self, True)
        return self.frozen_normalisation

    stages.BlockStage._normalisation = frozen
    try:
        yield
    finally:
        stages.BlockStage._normalisation = exact_statistics


def run(student: StudentNet, clip: Clip, refresh: int) -> dict[str, Any]:
    """Every frame change-based with a full evaluation every ``refresh`` frames; timed against both backends."""
    onnx = build_inference_backend("onnx", student, 1)
    dense = build_inference_backend("torch", student, 1)
    runner = ChangeBasedBackend(onnx, student, replace(ChangeBasedOptions(), fallback_fraction=1.0)).runner
    runner.refresh_interval, runner.backoff_frames = refresh, 0
    height, width = clip.frames[0].shape[:2]
    work = point_work(student, (height, width), fused_tail_fits(height, width))
    seconds: dict[str, list[float]] = {"change-based": [], "onnx": [], "torch": []}
    agreement, fractions = [], []
    for index, frame in enumerate(clip.frames):
        outputs = {}
        for name, infer in (("onnx", onnx.infer), ("change-based", runner.infer), ("torch", dense.infer)):
            start = time.perf_counter()
            outputs[name] = infer(frame)
            if index >= WARMUP:
                seconds[name].append(time.perf_counter() - start)
        if index >= WARMUP:
            agreement.append(float(np.mean(outputs["change-based"] == outputs["onnx"])))
            # a full evaluation (the first frame, a refresh) does all the work: fraction 1 everywhere
            fractions.append(runner.stats.changed if runner.stats.mode == "change" else dict.fromkeys(work, 1.0))
    changed = {name: float(np.mean([f[name] for f in fractions])) for name in work}
    ms = {name: 1000.0 * float(np.mean(values)) for name, values in seconds.items()}
    return {"ms": ms, "vs_torch": ms["torch"] / ms["change-based"], "vs_onnx": ms["onnx"] / ms["change-based"],
            "agreement": float(np.mean(agreement)), "worst_frame": float(np.min(agreement)),
            "work_bound": work_bound(changed, work),
            "changed_fraction": changed}


def render(results: dict[str, Any]) -> str:
    lines = ["# Change-based normalisation: exact statistics against frozen ones", "",
             "```", results["command"], "```", "",
             f"Machine: {results['machine']}; 1 thread; every frame change-based (no fallback); {results['frames']} "
             "frames per clip, the first 2 untimed. `exact`: the product's choice, statistics follow the frame; "
             "`frozen/R`: statistics of the last full evaluation, refreshed by a full evaluation every R frames "
             "(those frames are timed too). Agreement with `onnx`'s full-frame labels. Work bound as in "
             "[bench.md](bench.md), over every timed frame (a refresh counts as the whole work); the changed "
             "fractions likewise.", "",
             "| clip | normalisation | change-based ms | torch ms | onnx ms | vs torch | vs onnx | agreement (%) | "
             "worst frame (%) | work bound | enc3 / dec2 / tail changed (%) |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for row in results["rows"]:
        ms, changed = row["ms"], row["changed_fraction"]
        lines.append(
            f"| {row['clip']} | {row['normalisation']} | {ms['change-based']:.1f} | {ms['torch']:.1f} | "
            f"{ms['onnx']:.1f} | {row['vs_torch']:.2f}x | {row['vs_onnx']:.2f}x | {100 * row['agreement']:.3f} | "
            f"{100 * row['worst_frame']:.2f} | {row['work_bound']:.2f}x | "
            f"{100 * changed['enc3']:.0f} / {100 * changed['dec2']:.0f} / {100 * changed['tail']:.0f} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clip", action="append", required=True, help="PRESET:SEED or a video file, [@START]")
    parser.add_argument("--frames", type=int, default=100)
    parser.add_argument("--refresh", type=int, nargs="+", default=[10, 30], help="frozen statistics' refresh intervals")
    parser.add_argument("--out", type=Path, required=True, help="JSON results; the Markdown page goes beside it")
    args = parser.parse_args()
    torch.set_num_threads(1)
    student = load_default_student().model.eval()
    rows = []
    for spec in args.clip:
        clip = load_clip(spec, args.frames, (640, 360))
        never = args.frames + 1  # one full evaluation, at the first frame
        rows.append({"clip": spec, "normalisation": "exact", **run(student, clip, never)})
        with frozen_statistics():
            for refresh in [never, *args.refresh]:
                name = "frozen/never" if refresh == never else f"frozen/{refresh}"
                rows.append({"clip": spec, "normalisation": name, **run(student, clip, refresh)})
        print(render({"command": "", "machine": "", "frames": args.frames, "rows": rows}).splitlines()[-1], flush=True)
    results = {"command": script_command(__file__, sys.argv[1:]),
               "machine": f"{cpu_model()}, {os.cpu_count()} CPUs, torch {torch.__version__}",
               "frames": args.frames, "rows": rows}
    args.out.write_text(json.dumps(results, indent=1) + "\n")
    args.out.with_suffix(".md").write_text(render(results))


if __name__ == "__main__":
    main()
