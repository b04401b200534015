"""``shadowtutor bench load``: N simulated cameras against one server; turnaround, memory and errors."""

from __future__ import annotations

import argparse
import logging
import shlex
from pathlib import Path

from shadowtutor_lab.cli.options import frame_size, invoked_command, positive_float, positive_int


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "load",
        help="N simulated cameras (real WebSocket edges) against one server: turnaround, memory, errors",
        description="Each camera is a WebSocket edge speaking the protocol (the agent's transport) that sends key "
        "frames of a generated scene at --rate per second, at most one outstanding (the paper's client loop), and "
        "applies the updates to the weights it holds. Without --server a local server is started on loopback "
        "with the scene's labels as the teacher (--server-args \"--teacher maskrcnn --weights-path FILE\" gives it "
        "another). Exits 1 when a key frame went unanswered or anything erred.",
    )
    p.add_argument("--server", metavar="URL", help="server to load, ws(s):// or http(s)://HOST:PORT "
                   "(default: start one on loopback)")
    p.add_argument("--server-pid", type=positive_int, metavar="PID",
                   help="pid of the --server process when it runs on this machine (to read its RSS from /proc)")
    p.add_argument("--server-args", default="", metavar="FLAGS",
                   help="extra 'shadowtutor serve' flags for the local server, e.g. \"--max-updates 2\"; a --teacher "
                   "other than labels replaces the scene's labels")
    p.add_argument("--edges", type=positive_int, default=4, help="simulated cameras (default 4)")
    p.add_argument("--minutes", type=positive_float, default=1.0, help="length of the load (default 1)")
    p.add_argument("--rate", type=positive_float, default=1.0,
                   help="key frames per second per camera (default 1); a camera waits for each answer")
    p.add_argument("--size", type=frame_size, default=(320, 180), help="frame size WxH (default 320x180)")
    p.add_argument("--mode", choices=("distill", "naive"), default="distill", help="session mode (default distill)")
    p.add_argument("--out", type=Path, default=Path("load"), help="write PREFIX.json, .md and .png (default load)")
    p.add_argument("--seed", type=int, default=1, help="seed of the generated scene (default 1)")
    p.add_argument("--preset", default="moving-street", help="scene preset (default moving-street)")
    p.add_argument("--scene-frames", type=positive_int, default=240, help="frames in the scene (default 240)")
    p.add_argument("--answer-timeout", type=positive_float, default=60.0,
                   help="seconds to wait for a key frame's answer before counting it unanswered (default 60)")
    p.add_argument("--max-memory-growth", type=positive_float, metavar="MIB",
                   help="fail when the server's memory grew more than this from the first to the last quarter")
    p.add_argument("--log-dir", type=Path, help="keep the local server's log here (default: discarded)")
    p.add_argument("--note", action="append", default=[], help="a note for the report (repeatable)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from shadowtutor_lab.stress.load_report import write_report
    from shadowtutor_lab.stress.load_run import LoadConfig, run_load

    logging.getLogger("edge_agent").setLevel(logging.ERROR)  # N cameras' reconnect chatter; counted instead
    config = LoadConfig(
        edges=args.edges, minutes=args.minutes, rate=args.rate, size=args.size, mode=args.mode, server=args.server,
        server_pid=args.server_pid, server_args=tuple(shlex.split(args.server_args)), seed=args.seed,
        preset=args.preset, scene_frames=args.scene_frames, answer_timeout=args.answer_timeout,
        max_growth_mib=args.max_memory_growth, log_dir=args.log_dir, progress=not args.no_progress,
        command=invoked_command(args), notes=tuple(args.note),
    )
    results = run_load(config)
    totals, t, growth = results["totals"], results["turnaround"], results["memory"]["growth"]
    print(f"key frames: {totals['sent']} sent, {totals['answered']} answered ({totals['rate_per_s']:.2f}/s); "
          f"errors {totals['errors'] or 'none'}; disconnects {totals['disconnects']}")
    if t["count"]:
        print(f"turnaround ms: p50 {t['p50_ms']:.0f}, p95 {t['p95_ms']:.0f}, p99 {t['p99_ms']:.0f}, "
              f"max {t['max_ms']:.0f}")
    if growth is not None:
        print(f"server memory: {growth['first_quarter_bytes'] / 2**20:.1f} -> "
              f"{growth['last_quarter_bytes'] / 2**20:.1f} MiB (first -> last quarter, "
              f"{growth['growth_bytes'] / 2**20:+.1f} MiB)")
    paths = write_report(args.out, results)
    print("wrote " + ", ".join(str(p) for p in paths))
    for problem in results["problems"]:
        print(f"problem: {problem}")
    return 1 if results["problems"] else 0
