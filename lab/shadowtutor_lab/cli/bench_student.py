"""``shadowtutor bench student``: student inference latency and FPS per backend, with label agreement."""

from __future__ import annotations

import argparse
from pathlib import Path

from shadowtutor_lab.cli.options import emit_results, frame_size, invoked_command, positive_int

FRAMES_PRESET = "moving-street"
FRAMES_SEED = 0


def _sizes(text: str) -> tuple[tuple[int, int], ...]:
    return tuple(frame_size(part) for part in text.split(",") if part)


def _threads(text: str) -> tuple[int, ...]:
    return tuple(positive_int(part) for part in text.split(",") if part)


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("student", help="student inference latency / FPS per backend and label agreement")
    p.add_argument("--sizes", type=_sizes, default=((1280, 720), (640, 360)),
                   help="comma-separated WxH (default 1280x720,640x360)")
    p.add_argument("--frames", type=positive_int, default=30, help="timed frames per size and backend")
    p.add_argument("--warmup", type=int, default=3, help="untimed frames first")
    p.add_argument("--backends", default="reference,torch,onnx",
                   help="comma-separated backends (reference is required; default reference,torch,onnx; on a GPU "
                   "also onnx-cuda, onnx-trt, cuda)")
    p.add_argument("--threads", type=_threads, default=(),
                   help="comma-separated thread counts to measure (default: torch's current count)")
    p.add_argument("--with-unfused-tail", action="store_true",
                   help="also time torch and onnx with the tail unfused (what the fused tail gains, in one run)")
    p.add_argument("--student", type=Path, help="student checkpoint (default: the packaged pre-trained one)")
    p.add_argument("--out", type=Path, help="write the results as JSON here, and Markdown beside it (.md)")
    p.add_argument("--note", action="append", default=[], help="a note for the Markdown (repeatable)")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    import tempfile

    from shadowtutor.models.checkpoint import load_student
    from shadowtutor.models.pretrained import default_student_path
    from shadowtutor.scene_store import Scene
    from shadowtutor_lab.evaluation.machine import machine_info
    from shadowtutor_lab.evaluation.student_bench import StudentBenchConfig, render_markdown, run_student_bench
    from shadowtutor_lab.scenes.generator import make_scene

    config = StudentBenchConfig(
        sizes=args.sizes, frames=args.frames, warmup=args.warmup,
        backends=tuple(b for b in args.backends.split(",") if b), threads=args.threads,
        unfused_tail=args.with_unfused_tail,
    )
    student_path = args.student or default_student_path()
    loaded = load_student(student_path)
    with tempfile.TemporaryDirectory(prefix="shadowtutor-bench-student-") as tmp:

        def frames_for(size: tuple[int, int], count: int) -> list:
            directory = make_scene(FRAMES_PRESET, count, FRAMES_SEED, Path(tmp) / f"{size[0]}x{size[1]}",
                                   size=size, progress=False)
            return list(Scene.open(directory).frames())

        results = run_student_bench(loaded.model, frames_for, config)
    results.update(
        command=invoked_command(args),
        machine=machine_info(),
        student=str(args.student) if args.student else f"the packaged pre-trained student ({student_path.name})",
        frames_source=f"generated scene {FRAMES_PRESET} seed {FRAMES_SEED} (decoded from its MPEG-4 video)",
        notes=list(args.note),
    )
    markdown = render_markdown(results)
    emit_results(results, markdown, args.out)
    return 0
