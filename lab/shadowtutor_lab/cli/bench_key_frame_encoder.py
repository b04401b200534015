"""``shadowtutor bench key-frame-encoder``: the edge's FPS with and without the key-frame encoder, as a ratio."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from shadowtutor_lab.cli.options import invoked_command, positive_int


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "key-frame-encoder",
        help="the edge student's frame rate with and without encoding every N-th frame as a key frame, in one run",
    )
    p.add_argument("--scene", type=Path, required=True, help="a scene directory (its frames, at its size)")
    p.add_argument("--frames", type=positive_int, default=200, help="frames per arm (default 200)")
    p.add_argument("--stride", type=positive_int, default=10, help="a key frame every N frames (default 10)")
    p.add_argument("--block", type=positive_int, default=20, help="frames per alternating block (default 20)")
    p.add_argument("--codec", default="h264", help="the key-frame codec (default h264)")
    p.add_argument("--scale", type=float, default=1.0, help="the key-frame scale (default 1)")
    p.add_argument("--backend", default="auto", choices=("auto", "torch", "onnx", "reference"),
                   help="the student's backend (default: onnx where installed)")
    p.add_argument("--threads", type=positive_int, default=1, help="the student's threads (default 1)")
    p.add_argument("--out", type=Path, help="write the result as JSON here")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from shadowtutor_lab.evaluation.encoder_cost import EncoderCostConfig, measure

    try:
        result = measure(EncoderCostConfig(args.scene, args.frames, args.stride, args.block, args.codec, args.scale,
                                           args.backend, args.threads, invoked_command(args)))
    except ValueError as exc:
        raise SystemExit(f"shadowtutor bench key-frame-encoder: {exc}") from None
    text = json.dumps(result, indent=2) + "\n"
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)
    print(f"edge FPS {result['fps_without']:.2f} without, {result['fps_with']:.2f} with the key-frame encoder "
          f"(ratio {result['fps_ratio']:.3f}, drop {result['drop_percent']:.1f} %); "
          f"{result['encode_ms_median']:.1f} ms per key frame")
    return 0
