"""``shadowtutor scenes``: make benchmark scenes with ground truth, list the presets."""

from __future__ import annotations

import argparse
import re
import time
from pathlib import Path

_SIZE = re.compile(r"^\s*(\d+)\s*[xX]\s*(\d+)\s*$")


def parse_size(text: str) -> tuple[int, int]:
    """``"640x360"`` -> ``(640, 360)``."""
    match = _SIZE.match(text)
    if not match or min(int(match[1]), int(match[2])) <= 0:
        raise argparse.ArgumentTypeError(f"size must look like WIDTHxHEIGHT, e.g. 1280x720, got {text!r}")
    return (int(match[1]), int(match[2]))


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("scenes", help="benchmark scenes with ground-truth labels")
    actions = p.add_subparsers(dest="scenes_action", required=True, metavar="ACTION")

    make = actions.add_parser("make", help="render a scene: video.mp4, labels/*.png, scene.json")
    make.add_argument("--preset", required=True, help="a preset name (see 'shadowtutor scenes list')")
    make.add_argument("--frames", type=int, required=True, help="number of frames")
    make.add_argument("--seed", type=int, default=0, help="random seed, >= 0 (default 0)")
    make.add_argument("--out", type=Path, required=True, help="output directory (absent or empty)")
    make.add_argument("--size", type=parse_size, default=(1280, 720), help="WIDTHxHEIGHT (default 1280x720)")
    make.add_argument("--fps", type=float, default=30.0, help="frame rate (default 30)")
    make.add_argument("--force", action="store_true", help="replace an existing scene in --out")
    make.add_argument("--no-progress", action="store_true", help="no progress bar")
    make.set_defaults(handler=run_make)

    listing = actions.add_parser("list", help="the presets, one line each")
    listing.set_defaults(handler=run_list)


def run_make(args: argparse.Namespace) -> int:
    from shadowtutor.scenes.generator import make_scene
    from shadowtutor.scenes.io import Scene

    start = time.perf_counter()
    out = make_scene(args.preset, args.frames, args.seed, args.out, args.size, args.fps,
                     progress=not args.no_progress, force=args.force)
    seconds = time.perf_counter() - start
    meta = Scene.open(out).meta
    print(f"wrote {out}: {meta.preset}, {meta.frames} frames at {meta.width}x{meta.height}, "
          f"{meta.fps:g} fps, camera {meta.camera}, cuts at {list(meta.cuts)}")
    print(f"took {seconds:.1f} s ({meta.frames / seconds:.1f} frames/s)")
    return 0


def run_list(args: argparse.Namespace) -> int:
    from shadowtutor.scenes.presets import PRESETS

    width = max(len(name) for name in PRESETS)
    for name, preset in PRESETS.items():
        print(f"{name:<{width}}  {preset.description} [{', '.join(preset.classes)}; "
              f"cut every {preset.cut_interval} frames]")
    return 0
