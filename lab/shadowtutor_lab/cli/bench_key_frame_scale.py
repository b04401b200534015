"""``shadowtutor bench key-frame-scale``: P-8 mIoU and bytes with key frames sent at smaller scales."""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

from shadowtutor_lab.cli.options import (
    add_algorithm_options,
    add_server_link_options,
    algorithm_params,
    invoked_command,
    positive_int,
    with_server_link_options,
)


def _scales(text: str) -> tuple[float, ...]:
    try:
        return tuple(float(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"scales are numbers in (0, 1] separated by commas, got {text!r}") from None


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "key-frame-scale",
        help="P-8 mIoU and bytes up and down with key frames sent at a share of the frame's sides",
    )
    p.add_argument("--scenes", nargs="+", type=Path, required=True, metavar="SCENE",
                   help="scene directories or packaged clips (vtest, bikes)")
    p.add_argument("--scales", type=_scales, default=None, metavar="S,S,...",
                   help="key-frame scales in (0, 1] (default 1,0.667,0.5)")
    p.add_argument("--codecs", default=None, metavar="FRAME[@Q]/WEIGHTS",
                   help="link codecs as `bench traffic` writes them (default: what a default edge and server agree)")
    p.add_argument("--frames", type=positive_int, help="first N frames of each scene (default: all)")
    p.add_argument("--out", type=Path, default=Path("bench-key-frame-scale"), help="output directory")
    p.add_argument("--student", type=Path, help="student checkpoint (default: the packaged pre-trained one)")
    p.add_argument("--backend", default="auto", choices=("auto", "torch", "onnx", "reference"),
                   help="student inference backend on the edge side (default: onnx where installed)")
    p.add_argument("--threads", type=positive_int, help="torch / ONNX Runtime threads per worker (default 1)")
    p.add_argument("--jobs", type=positive_int, default=1, help="worker processes (one run = a scale on a scene)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--note", action="append", default=[], help="a note for the report (repeatable)")
    add_server_link_options(p)
    add_algorithm_options(p)
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from shadowtutor_lab.evaluation.key_frame_scale import DEFAULT_SCALES, ScaleStudyConfig, markdown, run_study
    from shadowtutor_lab.evaluation.traffic import default_setting, parse_setting

    try:
        codecs = with_server_link_options(parse_setting(args.codecs) if args.codecs else default_setting(), args)
        config = ScaleStudyConfig(
            scenes=tuple(args.scenes), codecs=codecs, scales=args.scales or DEFAULT_SCALES, frames=args.frames,
            student=args.student, backend=args.backend, threads=args.threads, params=algorithm_params(args),
            workers=args.jobs, progress=not args.no_progress, command=invoked_command(args), notes=tuple(args.note))
        for scale in config.scales:
            dataclasses.replace(codecs, key_frame_scale=scale)
    except ValueError as exc:
        raise SystemExit(f"shadowtutor bench key-frame-scale: {exc}") from None
    results = run_study(config)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    (args.out / "results.md").write_text(markdown(results))
    print(markdown(results))
    return 0
