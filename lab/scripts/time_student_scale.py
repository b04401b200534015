"""Edge milliseconds per frame of the student at the frame's size against a student input scale.

Both run in this one process, frame by frame in turn (a shared CPU's load hits both alike), on the
first frames of a scene; the scaled figure includes the resize and the label upsampling.

    python lab/scripts/time_student_scale.py --scene DIR --student-size 320x180 --frames 60 --out FILE.json
"""

from __future__ import annotations

import argparse
import itertools
import json
import time
from pathlib import Path

import numpy as np
import torch

from shadowtutor.models.checkpoint import load_student
from shadowtutor.models.inference import build_inference_backend, onnx_available
from shadowtutor.models.pretrained import default_student_path
from shadowtutor.models.scale import format_size, parse_size
from shadowtutor.scene_store import Scene
from shadowtutor_lab.evaluation.machine import machine_info


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scene", type=Path, required=True)
    parser.add_argument("--student-size", type=parse_size, required=True)
    parser.add_argument("--frames", type=int, default=60)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--backend", default="onnx" if onnx_available() else "torch")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    student = load_student(default_student_path()).model
    runs = {
        "native": build_inference_backend(args.backend, student, args.threads),
        format_size(args.student_size): build_inference_backend(args.backend, student, args.threads,
                                                                student_size=args.student_size),
    }
    frames = list(itertools.islice(Scene.open(args.scene).frames(None), args.warmup + args.frames))
    seconds: dict[str, list[float]] = {name: [] for name in runs}
    for index, frame in enumerate(frames):
        for name, backend in runs.items():
            start = time.perf_counter()
            backend.infer(frame)
            if index >= args.warmup:
                seconds[name].append(time.perf_counter() - start)
    result = {
        "command": "python lab/scripts/time_student_scale.py " + " ".join(
            f"--{k.replace('_', '-')} {format_size(v) if k == 'student_size' else v}" for k, v in vars(args).items()),
        "frame_size": f"{frames[0].shape[1]}x{frames[0].shape[0]}",
        "backend": args.backend, "threads": args.threads, "frames": args.frames,
        "ms_per_frame": {name: 1000 * float(np.mean(s)) for name, s in seconds.items()},
        "ms_per_frame_p50": {name: 1000 * float(np.median(s)) for name, s in seconds.items()},
        "machine": machine_info(),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result["ms_per_frame"]))


if __name__ == "__main__":
    main()
