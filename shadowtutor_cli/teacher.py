"""``shadowtutor teacher``: describe a teacher, or precompute its labels for a video."""

from __future__ import annotations

import argparse
import json
from typing import Any

from shadowtutor.teachers.registry import TEACHER_KINDS


def _add_teacher_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--teacher", required=True, choices=sorted(TEACHER_KINDS), help="teacher backend"
    )
    p.add_argument(
        "--device", help="auto (default), cpu, cuda[:N]; onnx: auto, cpu, cuda, tensorrt"
    )
    p.add_argument(
        "--class-names", help="comma-separated task classes (default: the LVS list / stored names)"
    )
    p.add_argument("--weights-path", help="maskrcnn/detectron2: local weights file")
    p.add_argument(
        "--score-threshold", type=float, help="maskrcnn/detectron2: instance score threshold"
    )
    p.add_argument("--model-path", help="onnx: the model file")
    p.add_argument("--labels-dir", help="labels: a labels directory or a scene directory")
    p.add_argument(
        "--option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="any other backend option (VALUE parsed as JSON when it parses), e.g. --option "
        "mean=[0.485,0.456,0.406] --option channel_order=bgr; repeatable",
    )


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "teacher", help="teachers: describe one, precompute labels for a video"
    )
    commands = p.add_subparsers(dest="teacher_command", required=True, metavar="ACTION")
    info = commands.add_parser("info", help="build a teacher and print its description as JSON")
    _add_teacher_options(info)
    info.set_defaults(handler=run_info)
    label = commands.add_parser("label", help="label every frame of a video into DIR/NNNNNN.png")
    _add_teacher_options(label)
    label.add_argument("--video", required=True, help="input video file")
    label.add_argument("--out", required=True, help="output directory")
    label.add_argument(
        "--batch-size", type=int, default=1, help="frames per teacher call (default 1)"
    )
    label.add_argument("--max-frames", type=int, help="stop after this many frames")
    label.add_argument("--no-progress", action="store_true", help="no progress bar")
    label.set_defaults(handler=run_label)
    install = commands.add_parser(
        "install", help="fetch a registry-packaged teacher model and convert it (setup)"
    )
    install.add_argument(
        "kind",
        choices=["mediapipe"],
        help="mediapipe: person segmentation from the mediapipe wheel",
    )
    install.add_argument(
        "--class-names", help="comma-separated task classes (default: the LVS list)"
    )
    install.set_defaults(handler=run_install)


def teacher_options(args: argparse.Namespace) -> dict[str, Any]:
    """Backend keyword options from the parsed flags (flags left out are not passed)."""
    options: dict[str, Any] = {}
    for item in args.option:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"--option takes KEY=VALUE, got {item!r}")
        try:
            options[key.replace("-", "_")] = json.loads(value)
        except json.JSONDecodeError:
            options[key.replace("-", "_")] = value
    flags = {
        "device": args.device,
        "class_names": args.class_names.split(",") if args.class_names else None,
        "weights_path": args.weights_path,
        "score_threshold": args.score_threshold,
        "model_path": args.model_path,
        "labels_dir": args.labels_dir,
    }
    options.update({k: v for k, v in flags.items() if v is not None})
    return options


def run_info(args: argparse.Namespace) -> int:
    from shadowtutor.teachers import build_teacher

    print(json.dumps(build_teacher(args.teacher, **teacher_options(args)).describe(), indent=2))
    return 0


def run_label(args: argparse.Namespace) -> int:
    from shadowtutor.teachers import build_teacher, write_teacher_labels

    teacher = build_teacher(args.teacher, **teacher_options(args))
    written = write_teacher_labels(
        teacher,
        args.video,
        args.out,
        batch_size=args.batch_size,
        max_frames=args.max_frames,
        progress=not args.no_progress,
    )
    print(f"wrote {written} label maps ({len(teacher.class_names)} classes) to {args.out}")
    return 0


def run_install(args: argparse.Namespace) -> int:
    from shadowtutor.classes import LVS_CLASSES
    from shadowtutor.teachers.mediapipe import MODEL, install_model

    names = tuple(args.class_names.split(",")) if args.class_names else LVS_CLASSES
    path = install_model(names)
    print(f"installed the {args.kind} teacher: {path} (from {MODEL.package}, {MODEL.licence})")
    return 0
