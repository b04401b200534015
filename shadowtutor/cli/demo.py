"""``shadowtutor demo``: the main job on a built-in default scene, on this machine, in a few minutes."""

from __future__ import annotations

import argparse
from pathlib import Path

from shadowtutor.cli.options import frame_size, invoked_command, positive_int


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "demo",
        help="run server and edge agent on loopback over a generated scene; compare with naive offloading",
    )
    p.add_argument("--out", type=Path, default=Path("runs/demo"), help="output directory (default runs/demo)")
    p.add_argument("--preset", default="fixed-street", help="scene preset (see `shadowtutor scenes list`)")
    p.add_argument("--frames", type=positive_int, default=300)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--size", type=frame_size, default=(640, 360), help="WIDTHxHEIGHT (default 640x360)")
    p.add_argument("--fps", type=float, default=30.0)
    p.add_argument("--cache-dir", type=Path, help="scene cache (default ~/.cache/shadowtutor/scenes)")
    p.add_argument("--change-based", action="store_true",
                   help="the ShadowTutor edge labels change-based (shadowtutor edge --change-based)")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from shadowtutor.demo.run import DemoConfig, run_demo

    config = DemoConfig(out=args.out, preset=args.preset, frames=args.frames, seed=args.seed, size=args.size,
                        fps=args.fps, cache_dir=args.cache_dir, command=invoked_command(args),
                        change_based=args.change_based)
    _, _, markdown = run_demo(config)
    print()
    print(markdown)
    print(f"report: {args.out / 'report.md'}; overlay video: {args.out / 'shadowtutor' / 'overlay.mp4'}")
    return 0
