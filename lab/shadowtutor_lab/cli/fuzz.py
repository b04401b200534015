"""``shadowtutor fuzz``: random and malformed messages against a live server; exit 1 on any violation."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from shadowtutor_lab.cli.options import frame_size, invoked_command, positive_int


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "fuzz",
        help="fuzz a live server (random, mutated, truncated, oversize, out-of-order messages) and check it "
        "answers every case as documented and stays healthy",
        description="Fuzz a live ShadowTutor server for a budget of seconds and/or cases, deterministic by "
        "seed. Without --server, a server is started on loopback (labels teacher, a small generated scene, "
        "tokens required, wrong ones fuzzed) and its log is checked for tracebacks. Writes PREFIX.json and "
        "PREFIX.md; exits 1 on any violation.",
    )
    p.add_argument("--server", help="ws(s):// or http(s):// URL of the server (default: start a local one)")
    p.add_argument("--seconds", type=float, default=None, help="time budget (default 60 s when "
                   "--cases is not given either)")
    p.add_argument("--cases", type=positive_int, default=None, help="case budget (with --seconds: whichever "
                   "ends first)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--out", type=Path, default=Path("runs/fuzz"), help="report prefix (default runs/fuzz)")
    p.add_argument("--token", default=os.environ.get("SHADOWTUTOR_EDGE_TOKEN"),
                   help="edge token for every HELLO [env SHADOWTUTOR_EDGE_TOKEN]; needs --edge-id")
    p.add_argument("--edge-id", help="the edge id of every case (the one the token was issued for)")
    p.add_argument("--canary-token", help="token of the canary edge (without it, under tokens, no canary)")
    p.add_argument("--canary-edge-id", help="the canary's edge id")
    p.add_argument("--ca-file", type=Path, help="CA bundle to verify a wss:// server with")
    p.add_argument("--max-message-bytes", type=positive_int,
                   help="the given server's max_message_bytes (default 16 MiB, the server's default)")
    p.add_argument("--frame-size", type=frame_size, default=(64, 48), help="WIDTHxHEIGHT of the sessions' "
                   "frames (default 64x48)")
    p.add_argument("--timeout", type=float, default=20.0,
                   help="seconds a case may take to get its answer or close (default 20; more than the server's "
                   "hello_timeout)")
    p.add_argument("--categories", help="comma-separated subset of the case categories (default: all; an unknown "
                   "name lists them)")
    p.add_argument("--log-dir", type=Path, help="where the local server's log goes (default: a temporary directory)")
    p.add_argument("--cache-dir", type=Path, help="scene cache (default ~/.cache/shadowtutor/scenes)")
    p.add_argument("--attacks", choices=("off", "short", "long"), default=None,
                   help="after the cases, the named attacks on the local server (a huge header, pre-HELLO floods "
                   "with its memory measured, idle-socket loops against a real edge, a bad tokens file and "
                   "SIGHUP): short (seconds) or long (default: short on a local server, off with --server)")
    p.add_argument("--no-progress", action="store_true", help="no progress lines")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from shadowtutor_lab.stress.fuzz_report import summary_lines, write_report
    from shadowtutor_lab.stress.fuzz_run import FuzzConfig, run_fuzz

    seconds = 60.0 if args.seconds is None and args.cases is None else args.seconds
    config = FuzzConfig(
        seconds=seconds, cases=args.cases, seed=args.seed, server=args.server, token=args.token,
        edge_id=args.edge_id, canary_token=args.canary_token, canary_edge_id=args.canary_edge_id,
        ca_file=args.ca_file, max_message_bytes=args.max_message_bytes, frame_size=args.frame_size,
        timeout=args.timeout, **_categories(args.categories),
        cache_dir=args.cache_dir, log_dir=args.log_dir, progress=not args.no_progress,
        command=invoked_command(args),
        attacks=args.attacks or ("off" if args.server is not None else "short"),
    )
    results = run_fuzz(config)
    json_path, md_path = write_report(results, args.out)
    for line in summary_lines(results):
        print(line)
    print(f"wrote {json_path} and {md_path}")
    return 0 if results["passed"] else 1


def _categories(text: str | None) -> dict[str, tuple[str, ...]]:
    return {} if text is None else {"categories": tuple(c.strip() for c in text.split(",") if c.strip())}
