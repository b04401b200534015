"""``shadowtutor change-based calibrate``: choose the change thresholds tau_l from sample clips (CBinfer, 3.3)."""

from __future__ import annotations

import argparse
from pathlib import Path

from shadowtutor_lab.cli.options import frame_size, invoked_command, positive_int


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("change-based", help="change-based inference for static cameras: calibrate thresholds")
    commands = p.add_subparsers(dest="change_based_command", required=True, metavar="COMMAND")
    c = commands.add_parser("calibrate", help="sweep each layer's threshold, first to last; write the threshold file")
    c.add_argument("--clip", action="append", required=True, metavar="SPEC",
                   help="sample clip: PRESET:SEED (a generated scene) or a video file, optionally @START; repeatable")
    c.add_argument("--frames", type=positive_int, default=20,
                   help="consecutive frames per clip (default 20: agreement decays as frames pass, so short "
                        "windows choose thresholds that keep less on a long run)")
    c.add_argument("--size", type=frame_size, default=(640, 360), help="frame size WxH (default 640x360)")
    c.add_argument("--step-loss", type=float, default=0.0002,
                   help="largest drop of pixel agreement with full-frame labels one layer's threshold may cost "
                        "(default 0.0002)")
    c.add_argument("--input-loss", type=float, default=0.002,
                   help="the same for the input layer (frame pixels, where compression noise is; default 0.002)")
    c.add_argument("--student", type=Path, help="student checkpoint (default: the packaged pre-trained one)")
    c.add_argument("--out", type=Path, required=True, help="the threshold file to write (JSON)")
    c.set_defaults(handler=run_calibrate)


def run_calibrate(args: argparse.Namespace) -> int:
    import torch

    from shadowtutor.acceleration.change_based.calibrate import calibrate
    from shadowtutor.acceleration.change_based.thresholds import threshold_document
    from shadowtutor.models.checkpoint import load_student
    from shadowtutor.models.pretrained import default_student_path
    from shadowtutor_lab.evaluation.clips import load_clip

    if not (0 <= args.step_loss < 1 and 0 <= args.input_loss < 1):
        raise ValueError("--step-loss and --input-loss must lie in [0, 1)")
    student = load_student(args.student or default_student_path()).model
    clips = [load_clip(spec, args.frames, args.size) for spec in args.clip]
    torch.set_num_threads(1)

    def show(step) -> None:
        tried = ", ".join(f"{tau:g}:{100 * value:.3f}%" for tau, value in step.tried)
        print(f"{step.layer:<12} chose {step.chosen:<10g} agreement {100 * step.agreement:.3f}%  tried {tried}",
              flush=True)

    thresholds, _ = calibrate(student, [clip.frames for clip in clips], args.step_loss, args.input_loss, show)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(threshold_document(thresholds, invoked_command(args)))
    print(f"wrote {args.out}")
    return 0
