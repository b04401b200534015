"""``shadowtutor bench server``: the server's key frames per second against concurrent sessions, in-process."""

from __future__ import annotations

import argparse
import json
import shlex
from datetime import date
from pathlib import Path

from shadowtutor_lab.cli.options import frame_size, invoked_command, positive_float, positive_int


def _list_of(kind, name: str):  # type: ignore[no-untyped-def]
    def parse(text: str) -> list:
        try:
            return [kind(part) for part in text.split(",") if part]
        except argparse.ArgumentTypeError as exc:
            raise argparse.ArgumentTypeError(f"{name}: {exc}") from None

    return parse


def _stage(text: str) -> str:
    from shadowtutor_lab.evaluation.server_bench import STAGES

    if text not in STAGES:
        raise argparse.ArgumentTypeError(f"unknown stage {text!r}; choose from {', '.join(STAGES)}")
    return text


def _engine(text: str) -> str:
    if text not in ("batched", "sequential", "auto"):
        raise argparse.ArgumentTypeError(f"unknown engine {text!r}; choose batched, sequential or auto")
    return text


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "server",
        help="the server's teaching throughput in-process (no network): key frames/s against sessions",
        description="Drives the server's own runtime (teacher queue, distillation engine, one distiller per "
        "session; settings as for 'shadowtutor serve', given in --server-args) with N concurrent sessions, each "
        "with one key frame in flight, on generated frames. Reports key frames per second, the per-key-frame "
        "latency (p50/p95), the steps per key frame and the GPU's busy fraction (NVML) for the stages teacher, "
        "distill and both. Without --teacher in --server-args the teacher is the generated scene's exact labels "
        "(free); THRESHOLD defaults to 0.999 here so that every step runs.",
    )
    p.add_argument("--sizes", type=_list_of(frame_size, "--sizes"), default=[(640, 360), (1280, 720)],
                   help="frame sizes WxH, comma-separated (default 640x360,1280x720)")
    p.add_argument("--sessions", type=_list_of(positive_int, "--sessions"), default=[1, 4, 16, 64, 256],
                   help="concurrent session counts, comma-separated (default 1,4,16,64,256)")
    p.add_argument("--stages", type=_list_of(_stage, "--stages"), default=["teacher", "distill", "both"],
                   help="what a key frame costs: teacher, distill, both (default all three)")
    p.add_argument("--engines", type=_list_of(_engine, "--engines"), default=["auto"],
                   help="distillation engines to compare: batched, sequential, auto (default auto)")
    p.add_argument("--seconds", type=positive_float, default=5.0,
                   help="measured window per point, longer until every session has two key frames answered in "
                   "it, at most 10x (default 5)")
    p.add_argument("--warmup", type=positive_float, default=2.0, help="warm-up seconds per point (default 2)")
    p.add_argument("--server-args", default="", metavar="FLAGS",
                   help="'shadowtutor serve' flags, e.g. \"--device cuda --teacher maskrcnn --weights-path W.pt\"")
    p.add_argument("--out", type=Path, default=Path("server_bench"), help="write PREFIX.json and PREFIX.md")
    p.add_argument("--profile-out", type=Path, metavar="FILE",
                   help="also write the capacity planner's server profile (needs all three stages)")
    p.set_defaults(handler=run)


def _server_settings(flags: str):  # type: ignore[no-untyped-def]
    """The server's settings from ``serve`` flags; THRESHOLD 0.999 unless given. ValueError on bad flags."""
    from services.cli import DEST_PREFIX, settings_from_args
    from services.server.settings import ServerSettings
    from shadowtutor.config.settings_flags import add_settings_flags

    parser = argparse.ArgumentParser(prog="--server-args", add_help=False, exit_on_error=False)
    add_settings_flags(parser, ServerSettings, DEST_PREFIX)
    try:
        args, unknown = parser.parse_known_args(shlex.split(flags))
    except (argparse.ArgumentError, ValueError) as exc:
        raise ValueError(f"--server-args: {exc}") from None
    if unknown:
        raise ValueError(f"--server-args: unknown server flags {' '.join(unknown)}")
    settings = settings_from_args(args)
    if not {"threshold", "threshold_policy"} & settings.algorithm.model_fields_set:
        settings = settings.model_copy(update={"algorithm": settings.algorithm.replace(threshold=0.999)})
    return settings, "teacher" not in settings.model_fields_set


def run(args: argparse.Namespace) -> int:
    from shadowtutor_lab.evaluation.server_bench import markdown_report, run_server_bench, server_profile

    try:
        settings, synthetic = _server_settings(args.server_args)
    except ValueError as exc:
        raise SystemExit(f"error: {exc}") from None
    command = invoked_command(args)
    try:
        points, info = run_server_bench(
            settings, synthetic, args.sizes, args.sessions, args.stages, args.engines, args.warmup, args.seconds,
        )
    except Exception as exc:  # a teacher or student that cannot load: one line
        raise SystemExit(f"error: cannot run the server bench: {' '.join(str(exc).split())[:400]}") from None
    args.out.parent.mkdir(parents=True, exist_ok=True)
    report = {"command": command, **info, "points": [p.row() for p in points]}
    args.out.with_suffix(".json").write_text(json.dumps(report, indent=2) + "\n")
    args.out.with_suffix(".md").write_text(markdown_report(points, info, command))
    print(f"wrote {args.out.with_suffix('.json')} and {args.out.with_suffix('.md')} ({info['device']})")
    if args.profile_out is not None:
        try:
            profile = server_profile(points, info, command, date.today().isoformat())
        except ValueError as exc:
            raise SystemExit(f"error: {exc}") from None
        args.profile_out.parent.mkdir(parents=True, exist_ok=True)
        args.profile_out.write_text(json.dumps(profile, indent=2) + "\n")
        print(f"wrote the server profile {args.profile_out}")
    return 0
