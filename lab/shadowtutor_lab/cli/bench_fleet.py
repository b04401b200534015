"""``shadowtutor bench fleet``: GPUs for N cameras from the measured server profiles."""

from __future__ import annotations

import argparse
from pathlib import Path

from shadowtutor_lab.cli.options import emit_results, frame_size, invoked_command, positive_float


def _ratio(text: str) -> tuple[str, float]:
    """``LABEL=R`` (R in (0, 1]) -> (LABEL, R)."""
    label, sep, value = text.partition("=")
    try:
        ratio = float(value)
    except ValueError:
        ratio = -1.0
    if not sep or not label or not 0 < ratio <= 1:
        raise argparse.ArgumentTypeError(f"expected LABEL=R with R in (0, 1], e.g. demo=0.127; got {text!r}")
    return label, ratio


def _counts(text: str) -> list[int]:
    try:
        counts = [int(part) for part in text.split(",")]
    except ValueError:
        counts = []
    if not counts or min(counts) < 1:
        raise argparse.ArgumentTypeError(f"expected camera counts >= 1 separated by commas, got {text!r}")
    return counts


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "fleet", help="GPUs for N cameras at a key-frame ratio, from the measured server profiles",
        description="For every server profile (the shipped ones and --server-profile FILE), every camera count "
        "and every key-frame ratio: cameras one GPU carries (one teaching replica per GPU) and the GPUs the "
        "fleet needs, ceil(cameras / cameras per GPU). GPU compute only: add headroom for a lost replica.")
    p.add_argument("--cameras", type=_counts, default=[100, 1000], metavar="N,N",
                   help="fleet sizes (default 100,1000)")
    p.add_argument("--key-frame-ratio", type=_ratio, action="append", required=True, metavar="LABEL=R",
                   help="a measured key-frame ratio and where it comes from, e.g. demo=0.127 (repeatable)")
    p.add_argument("--fps", type=positive_float, default=30.0, help="each camera's frame rate (default 30)")
    p.add_argument("--size", type=frame_size, default=(1280, 720), help="key-frame size WxH (default 1280x720)")
    p.add_argument("--mean-steps", type=positive_float, default=None,
                   help="distillation steps per key frame (default: the profile's)")
    p.add_argument("--server-profile", action="append", type=Path, default=[], metavar="FILE",
                   help="another server profile (bench server --profile-out)")
    p.add_argument("--out", type=Path, default=None, help="write FILE (JSON) and FILE.md")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from shadowtutor_lab.capacity.fleet import fleet_size
    from shadowtutor_lab.capacity.plan import CameraLoad
    from shadowtutor_lab.capacity.profile import load_profile, shipped_profiles

    profiles = shipped_profiles() + [load_profile(path) for path in args.server_profile]
    if not profiles:
        raise ValueError("no server profile: pass --server-profile FILE")
    rows = []
    for label, ratio in args.key_frame_ratio:
        load = CameraLoad(args.fps, ratio, args.mean_steps, args.size, 0.0, 0.0)
        for profile in profiles:
            for cameras in args.cameras:
                rows.append({"ratio_label": label, **fleet_size(profile, load, cameras).to_dict()})
    command = invoked_command(args)
    lines = [
        "# GPUs for a camera fleet, from measured server profiles", "",
        *profile_lines(profiles), "",
        f"Cameras at {args.fps:g} frames/s, key frames of {args.size[0]}x{args.size[1]}, "
        f"{'the profile' + chr(39) + 's' if args.mean_steps is None else f'{args.mean_steps:g}'} distillation steps "
        "per key frame; "
        "one teaching replica per GPU. GPU compute only: the ingress, the network and headroom for a lost "
        "replica come on top.", "",
        "| key-frame ratio | device (profile) | size | ms per key frame | cameras per GPU | cameras | GPUs "
        "| utilisation |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        lines.append(
            f"| {row['ratio_label']} ({100 * row['key_frame_ratio']:.2f} %) | {row['device']} "
            f"({Path(row['profile']).name}) | {row['size']} | {row['key_frame_ms']:.2f} | "
            f"{row['cameras_per_gpu']} | {row['cameras']} | {row['gpus']} | {100 * row['utilisation']:.0f} % |")
    lines += ["", "Command:", "", "```", command, "```", ""]
    used = [{"file": Path(p.path).name, "device": p.device, "measured": p.measured, "teacher": p.teacher,
             "teacher_weights": p.teacher_weights, "command": p.command} for p in profiles]
    emit_results({"command": command, "profiles": used, "rows": rows}, "\n".join(lines), args.out)
    return 0


def profile_lines(profiles: list) -> list[str]:
    """Markdown: which profiles the figures come from and how each was made; a warning where a
    teacher ran with random weights."""
    lines = ["Server profiles used (the shipped ones, then each `--server-profile FILE`):", ""]
    lines += [f"- {profile.provenance()}" for profile in profiles]
    if any(profile.teacher_weights.startswith("random") for profile in profiles):
        lines += ["", "A teacher with random weights times the network's computation, not a trained "
                  "teacher's: Mask R-CNN then keeps 100 detections on every frame, and the distillation "
                  "steps per key frame are the run's (or `--mean-steps`), not where THRESHOLD stops on "
                  "real labels. How a trained teacher on your scenes compares has not been measured: "
                  "time your GPU with your weights (`shadowtutor bench server --profile-out FILE`) and "
                  "pass `--server-profile FILE`."]
    return lines
