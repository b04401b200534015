"""``shadowtutor bench accuracy``: Wild, P-1, P-8 and F-1 on scenes (the paper's Tables 2, 5 and 6)."""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from shadowtutor.models.precision import TRAINING_PRECISIONS
from shadowtutor_lab.cli.options import (
    add_algorithm_options,
    add_server_link_options,
    algorithm_params,
    frame_size,
    invoked_command,
    positive_int,
    student_size,
    with_server_link_options,
)


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "accuracy", help="mIoU of Wild / P-1 / P-8 / F-1, key frames, distillation steps, bytes per key frame"
    )
    p.add_argument("--scenes", nargs="+", type=Path, required=True, metavar="SCENE",
                   help="scene directories, packaged clips (vtest, bikes) or video files; a clip or video is "
                        "labelled once by --teacher (mediapipe when that is labels) into the scene cache")
    p.add_argument("--codecs", default=None, metavar="FRAME[@Q]/WEIGHTS",
                   help="the protocol's codecs on the simulated link, as `bench traffic` writes them, e.g. "
                        "jpeg@80/q4sparse+zstd,f16+zstd (default: none, the paper's raw accounting)")
    add_accuracy_options(p)
    p.set_defaults(handler=run)


def add_accuracy_options(parser: argparse.ArgumentParser,
                         overrides: Mapping[str, tuple[Any, str]] | None = None) -> None:
    """Every option of ``bench accuracy`` but ``--scenes`` (the run, the student, the teacher, the workers and
    the algorithm parameters of :func:`~shadowtutor_lab.cli.options.add_algorithm_options`), for each command that
    runs the harness as it does; ``overrides`` maps an option's ``dest`` to its ``(default, help)`` there."""
    p = parser
    p.add_argument("--distill-precision", default="fp32", choices=TRAINING_PRECISIONS,
                   help="the servers' training arithmetic, as the server's --distill-precision (default fp32)")
    actions = {
        "frames": p.add_argument("--frames", type=positive_int, help="first N frames of each scene (default: all)"),
        "size": p.add_argument("--size", type=frame_size, help="run at WxH (default: each scene's size)"),
        "student_size": p.add_argument(
            "--student-size", type=student_size, metavar="WxH",
            help="run the student (edge and server copies) on frames resized to WxH, its labels upsampled "
                 "to the frame (default: native, the frame's size)"),
        "out": p.add_argument("--out", type=Path, default=Path("bench-accuracy"), help="output directory"),
        "student": p.add_argument("--student", type=Path,
                                  help="student checkpoint (default: the packaged pre-trained one)"),
        "teacher": p.add_argument("--teacher", default="labels",
                                  help="teacher backend (default labels: each scene's ground truth)"),
        "teacher_option": p.add_argument("--teacher-option", action="append", default=[], metavar="KEY=VALUE",
                                         help="option for a non-labels teacher, e.g. weights=/path (repeatable)"),
        "backend": p.add_argument("--backend", default="auto", choices=("auto", "torch", "onnx", "reference"),
                                  help="student inference backend on the edge side (default: onnx where installed)"),
        "threads": p.add_argument("--threads", type=positive_int,
                                  help="torch / ONNX Runtime threads (per worker with --jobs; default: torch's, "
                                       "1 per worker)"),
        "jobs": p.add_argument("--jobs", type=positive_int, default=1,
                               help="worker processes; each scene is two passes (P-1+P-8, F-1+Wild) that can run "
                                    "in parallel"),
        "no_resume": p.add_argument("--no-resume", action="store_true",
                                    help="recompute scenes whose traces are stored"),
        "no_progress": p.add_argument("--no-progress", action="store_true", help="no progress bar"),
        "note": p.add_argument("--note", action="append", default=[], help="a note for results.md (repeatable)"),
    }
    actions.update(add_server_link_options(p))
    for dest, (default, text) in (overrides or {}).items():
        actions[dest].default, actions[dest].help = default, text
    add_algorithm_options(p)


def teacher_options(pairs: list[str]) -> dict[str, str]:
    """``--teacher-option KEY=VALUE`` pairs as keyword options (ValueError for a pair without ``=``)."""
    options = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ValueError(f"--teacher-option takes KEY=VALUE, got {pair!r}")
        options[key] = value
    return options


def accuracy_settings(args: argparse.Namespace) -> dict[str, Any]:
    """The options of :func:`add_accuracy_options` as the keyword fields of
    :class:`~shadowtutor_lab.evaluation.accuracy.AccuracyConfig` (ValueError for a bad value)."""
    return {
        "out_dir": args.out,
        "frames": args.frames,
        "size": args.size,
        "student_size": args.student_size,
        "student": args.student,
        "teacher": args.teacher,
        "teacher_options": teacher_options(args.teacher_option),
        "backend": args.backend,
        "threads": args.threads,
        "params": algorithm_params(args),
        "workers": args.jobs,
        "resume": not args.no_resume,
        "progress": not args.no_progress,
        "command": invoked_command(args),
        "notes": tuple(args.note),
        "precision": args.distill_precision,
    }


def run(args: argparse.Namespace) -> int:
    import torch

    from shadowtutor_lab.evaluation.accuracy import AccuracyConfig, run_accuracy
    from shadowtutor_lab.evaluation.traffic import parse_setting

    if args.threads:
        torch.set_num_threads(args.threads)
    if args.teacher == "labels" and args.teacher_option:
        raise ValueError("the labels teacher reads each scene's labels/: it takes no --teacher-option")
    link = with_server_link_options(parse_setting(args.codecs), args) if args.codecs else None
    config = AccuracyConfig(scenes=tuple(args.scenes), link=link, **accuracy_settings(args))
    results = run_accuracy(config)
    for name, r in results.items():
        print(f"{name}: Wild {r['wild_miou']:.1f}  P-1 {r['p1_miou']:.1f}  P-8 {r['p8_miou']:.1f}  "
              f"F-1 {r['f1_miou']:.1f}  key frames {r['key_frame_ratio']:.2f}%  "
              f"steps {r['mean_distill_steps_partial']:.2f}/{r['mean_distill_steps_full']:.2f}")
    print(f"wrote {args.out / 'results.json'}, results.md, meta.json and plots/")
    return 0
