"""``shadowtutor bench change-based``: change-based inference on fixed and moving cameras against full-frame."""

from __future__ import annotations

import argparse
from pathlib import Path

from shadowtutor_lab.cli.options import emit_results, frame_size, invoked_command, positive_int

DEFAULT_CLIPS = ("fixed-people:1", "fixed-animals:3", "fixed-people:4", "moving-people:0", "egocentric-people:0")


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("change-based", help="change-based student vs full-frame backends: speed, agreement")
    p.add_argument("--clip", action="append", metavar="SPEC",
                   help="PRESET:SEED (generated, with truth) or a video file, optionally @START; repeatable "
                        f"(default: {', '.join(DEFAULT_CLIPS)})")
    p.add_argument("--video", action="append", default=[], type=Path,
                   help="a real fixed-camera video (no truth), added to the clips; repeatable")
    p.add_argument("--frames", type=positive_int, default=60, help="frames per clip (default 60)")
    p.add_argument("--warmup", type=int, default=2, help="untimed frames first (default 2)")
    p.add_argument("--size", type=frame_size, default=(640, 360), help="frame size WxH (default 640x360)")
    p.add_argument("--threads", type=positive_int, default=1, help="torch and ONNX Runtime threads (default 1)")
    p.add_argument("--change-thresholds", type=Path, help="threshold file (default: the built-in one)")
    p.add_argument("--change-scale", type=float, default=1.0, help="multiply every threshold (default 1)")
    p.add_argument("--end-to-end", metavar="SPEC",
                   help="also run ShadowTutor P-8 on this generated clip with and without change-based edges")
    p.add_argument("--end-to-end-frames", type=positive_int, default=120, help="frames of that run (default 120)")
    p.add_argument("--student", type=Path, help="student checkpoint (default: the packaged pre-trained one)")
    p.add_argument("--out", type=Path, help="write the results as JSON here, and Markdown beside it (.md)")
    p.add_argument("--note", action="append", default=[], help="a note for the Markdown (repeatable)")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:

    from shadowtutor.acceleration.change_based.backend import ChangeBasedOptions
    from shadowtutor.models.checkpoint import load_student
    from shadowtutor.models.pretrained import default_student_path
    from shadowtutor_lab.evaluation.change_based_bench import end_to_end, render_markdown, run_change_based_bench
    from shadowtutor_lab.evaluation.clips import load_clip
    from shadowtutor_lab.evaluation.machine import machine_info

    options = ChangeBasedOptions(thresholds_file=args.change_thresholds, scale=args.change_scale)
    options.thresholds()  # a bad file fails before any work
    student_path = args.student or default_student_path()
    loaded = load_student(student_path)
    specs = [*(args.clip or DEFAULT_CLIPS), *(str(v) for v in args.video)]
    clips = [load_clip(spec, args.frames + args.warmup, args.size) for spec in specs]
    results = run_change_based_bench(loaded.model, clips, options, args.threads, args.warmup)
    if args.end_to_end:
        clip = load_clip(args.end_to_end, args.end_to_end_frames, args.size)
        results["end_to_end"] = end_to_end(loaded.model, loaded.class_names, clip, options, args.threads)
    results.update(
        command=invoked_command(args), machine=machine_info(), notes=list(args.note),
        student=str(args.student) if args.student else f"the packaged pre-trained student ({student_path.name})",
    )
    markdown = render_markdown(results)
    emit_results(results, markdown, args.out)
    return 0
