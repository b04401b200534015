"""``shadowtutor evaluate VIDEO...``: ShadowTutor on one's own footage, the operating point and the fleet, as
one self-contained HTML report (``OUT/report.html``) and its numbers (``OUT/results.json``)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING

from shadowtutor_lab.cli.bench_accuracy import accuracy_settings, add_accuracy_options
from shadowtutor_lab.cli.options import positive_int, with_server_link_options

if TYPE_CHECKING:
    from shadowtutor_lab.evaluation.operating_point import Target

DEFAULT_FRAMES = 150
DEFAULT_MAX_WIDTH = 320
DEFAULT_THRESHOLDS = "0.5,0.65,0.8,auto"
DEFAULT_MIN_STRIDES = "8,16"
DEFAULT_LINK = "80Mbps"  # the paper's link (section 5.1)


def _thresholds(text: str) -> tuple[float | str, ...]:
    """``0.5,0.8,auto`` -> the THRESHOLD settings of the sweep (numbers in (0, 1), or ``auto``)."""
    from shadowtutor.algorithms.params import AlgorithmParams, threshold_fields

    values = []
    for item in (v.strip() for v in text.split(",")):
        try:
            AlgorithmParams(**threshold_fields(item))
        except (TypeError, ValueError) as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
        values.append("auto" if item.lower() == "auto" else float(item))
    return tuple(values)


def _ints(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected whole numbers separated by commas, got {text!r}") from None
    if not values or any(v < 1 for v in values):
        raise argparse.ArgumentTypeError(f"strides are >= 1, got {text!r}")
    return values


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "evaluate", help="ShadowTutor on your footage: accuracy, traffic, operating point, cameras per server "
                         "(one HTML report)",
        description="Label the footage with the teacher (cached), run ShadowTutor, Wild and naive offloading on "
                    "it in-process, sweep THRESHOLD x MIN_STRIDE, recommend an operating point for a target and "
                    "plan the servers. Writes OUT/report.html (opens offline) and OUT/results.json.")
    p.add_argument("videos", nargs="+", metavar="VIDEO",
                   help="a video file, a camera (0 or /dev/video0), an rtsp:// (or other URL) stream or a GStreamer "
                        "pipeline: whatever `shadowtutor edge --source` reads")
    add_accuracy_options(p, {
        "frames": (DEFAULT_FRAMES, f"first N frames of each video (default {DEFAULT_FRAMES}; the count read from "
                                   "a camera or stream)"),
        "size": (None, "evaluate at WxH (default: the footage's size, scaled down to --max-width)"),
        "out": (Path("evaluate-report"), "output directory (default evaluate-report)"),
        "teacher": ("mediapipe", "teacher backend that labels the footage (default mediapipe, the real teacher "
                                 "that runs on a CPU)"),
        "jobs": (1, "worker processes for the operating-point sweep (default 1)"),
        "no_resume": (False, "label the footage again instead of reusing the teacher-label cache"),
        "note": ([], "a note for the report (repeatable)"),
    })
    p.add_argument("--max-width", type=positive_int, default=DEFAULT_MAX_WIDTH,
                   help=f"without --size, scale wider footage down to this width (default {DEFAULT_MAX_WIDTH})")
    p.add_argument("--camera-kind", choices=("fixed", "moving", "egocentric"), default="fixed",
                   help="how the camera moves, for the record (default fixed)")
    p.add_argument("--cache-dir", type=Path, help="scene cache (default ~/.cache/shadowtutor/scenes)")
    p.add_argument("--accept-short", action="store_true",
                   help="a video damaged before its end: evaluate the frames read before the damage (default: fail)")
    edge = p.add_argument_group("edge accelerations")
    edge.add_argument("--change-based", action="store_true",
                      help="the edges' students run change-based (a fixed camera; shadowtutor edge --change-based)")
    link = p.add_argument_group("link and operating points")
    link.add_argument("--codecs", default=None, metavar="FRAME[@Q]/WEIGHTS",
                      help="codecs on the link, as `bench traffic` writes them, e.g. jpeg@80/q8delta+zstd,f16+zstd "
                           "(default: what a default edge and server agree on)")
    link.add_argument("--sweep-thresholds", type=_thresholds, default=_thresholds(DEFAULT_THRESHOLDS),
                      metavar="T,T,...", help=f"THRESHOLD settings of the sweep, numbers or auto (the per-session "
                                              f"policy of --threshold auto; default {DEFAULT_THRESHOLDS})")
    link.add_argument("--sweep-min-strides", type=_ints, default=_ints(DEFAULT_MIN_STRIDES), metavar="S,S,...",
                      help=f"MIN_STRIDE grid of the sweep (default {DEFAULT_MIN_STRIDES})")
    target = link.add_mutually_exclusive_group()
    target.add_argument("--target-key-frames", metavar="PERCENT",
                        help="recommend the best P-8 at most this share of key frames, e.g. 5%% (the default, 5%%)")
    target.add_argument("--target-miou", metavar="PERCENT",
                        help="recommend the fewest key frames with P-8 at least this, e.g. 70")
    target.add_argument("--uplink-budget", metavar="RATE",
                        help="recommend the best P-8 whose uplink per camera fits, e.g. 300kbps")
    link.add_argument("--link", default=DEFAULT_LINK, metavar="RATE",
                      help=f"the link key frames and updates cross, for the bounds and cameras per link "
                           f"(default {DEFAULT_LINK}, the paper's)")
    servers = p.add_argument_group("capacity plan")
    servers.add_argument("--server-profile", action="append", type=Path, default=[], metavar="FILE",
                         help="a server profile (shadowtutor bench server --profile-out FILE); repeatable; the "
                              "shipped profiles are always included")
    p.add_argument("--strip", type=int, default=3, metavar="N",
                   help="frames shown teacher | ShadowTutor | Wild, spread over the run (default 3), plus the "
                        "worst")
    p.set_defaults(handler=run)


def _target(args: argparse.Namespace) -> Target:
    """The recommendation's target from the flags (default: at most 5 % key frames)."""
    from shadowtutor.config.rates import parse_rate
    from shadowtutor_lab.evaluation.operating_point import Target, parse_percent

    if args.target_miou is not None:
        return Target("miou", parse_percent(args.target_miou))
    if args.uplink_budget is not None:
        return Target("uplink", parse_rate(args.uplink_budget))
    return Target("key_frames", parse_percent(args.target_key_frames or "5%"))


def run(args: argparse.Namespace) -> int:
    import torch

    from shadowtutor.classes import LVS_CLASSES
    from shadowtutor.config.rates import parse_rate
    from shadowtutor.teachers.registry import teacher_class
    from shadowtutor_lab.capacity.profile import load_profile, shipped_profiles
    from shadowtutor_lab.evaluation.evaluate import EvaluateConfig, evaluate
    from shadowtutor_lab.evaluation.traffic import default_setting, parse_setting
    from shadowtutor_lab.report.html import render_report

    if args.threads:
        torch.set_num_threads(args.threads)
    if args.teacher == "labels":
        raise ValueError("the labels teacher reads a scene's stored labels: footage needs a teacher that labels "
                         "frames (e.g. --teacher mediapipe or maskrcnn)")
    teacher_class(args.teacher)  # an unknown teacher fails here, before any footage is read
    profiles = [load_profile(path) for path in args.server_profile]
    config = EvaluateConfig(
        sources=tuple(args.videos),
        **accuracy_settings(args),
        max_width=args.max_width,
        codecs=with_server_link_options(parse_setting(args.codecs) if args.codecs else default_setting(), args),
        thresholds=args.sweep_thresholds,
        min_strides=args.sweep_min_strides,
        target=_target(args),
        profiles=(*shipped_profiles(), *profiles),
        link_bps=parse_rate(args.link),
        camera=args.camera_kind,
        change_based=args.change_based,
        strip=max(0, args.strip),
        cache_dir=args.cache_dir,
        accept_short=args.accept_short,
    )
    results, strips = evaluate(config)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    (args.out / "report.html").write_text(render_report(results, strips, LVS_CLASSES))
    for name, video in results["videos"].items():
        s, rec = video["summary"], video["sweep"]["recommendation"]
        point = rec["point"]
        print(f"{name}: Wild {s['wild_miou']:.1f}  ShadowTutor {s['shadowtutor_miou']:.1f}  naive "
              f"{s['naive_miou']:.1f}  key frames {s['key_frame_ratio']:.1f}%  -> recommended THRESHOLD "
              f"{point['setting']} MIN_STRIDE {point['min_stride']} ({point['key_frame_ratio']:.1f}% key "
              f"frames, P-8 {point['p8_miou']:.1f}){'' if rec['met'] else ' [target not met]'}")
    print(f"wrote {args.out / 'report.html'} and {args.out / 'results.json'}")
    return 0
