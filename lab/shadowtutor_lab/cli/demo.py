"""``shadowtutor demo``: the main job on a real clip with a real teacher, on this machine, in a few minutes."""

from __future__ import annotations

import argparse
from pathlib import Path

from shadowtutor_lab.cli.options import frame_size, invoked_command, positive_int


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "demo",
        help="run server and edge agent on loopback over a real clip with a real teacher; compare with naive "
             "offloading",
    )
    p.add_argument("--out", type=Path, default=Path("runs/demo"), help="output directory (default runs/demo)")
    p.add_argument("--clip", default="vtest", help="real clip (default vtest; see `shadowtutor scenes fetch-real`)")
    p.add_argument("--teacher", default="mediapipe", help="the server's teacher for a real clip (default mediapipe)")
    p.add_argument("--width", type=positive_int, default=480, help="a real clip's width, aspect kept (default 480)")
    p.add_argument("--generated", action="store_true",
                   help="a generated scene instead, its ground truth as the teacher (--preset, --seed, --size, --fps)")
    p.add_argument("--frames", type=positive_int, default=300, help="frames (a real clip: its first ones; default 300)")
    p.add_argument("--preset", default="fixed-street", help="generated scene preset (see `shadowtutor scenes list`)")
    p.add_argument("--seed", type=int, default=7, help="generated scene seed")
    p.add_argument("--size", type=frame_size, default=(640, 360), help="generated scene WIDTHxHEIGHT (default 640x360)")
    p.add_argument("--fps", type=float, default=30.0, help="generated scene frame rate")
    p.add_argument("--cache-dir", type=Path, help="scene cache (default ~/.cache/shadowtutor/scenes)")
    acceleration = p.add_mutually_exclusive_group()
    acceleration.add_argument("--change-based", action="store_true",
                              help="the ShadowTutor edge labels change-based (shadowtutor edge --change-based)")
    acceleration.add_argument("--flow-path", action="store_true",
                              help="the ShadowTutor edge warps frames between segmentations by optical flow "
                                   "(shadowtutor edge --flow-path; for moving cameras such as --clip bikes)")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from shadowtutor_lab.demo.processes import exit_on_signals
    from shadowtutor_lab.demo.run import DemoConfig, run_demo

    config = DemoConfig(out=args.out, clip=None if args.generated else args.clip, teacher=args.teacher,
                        width=args.width, preset=args.preset, frames=args.frames, seed=args.seed, size=args.size,
                        fps=args.fps, cache_dir=args.cache_dir, command=invoked_command(args),
                        change_based=args.change_based, flow_path=args.flow_path)
    with exit_on_signals("shadowtutor demo"):  # SIGTERM, SIGHUP: the children are stopped as on Ctrl-C
        _, _, markdown = run_demo(config)
    print()
    print(markdown)
    print(f"report: {args.out / 'report.md'}; overlay video: {args.out / 'shadowtutor' / 'overlay.mp4'}")
    return 0
