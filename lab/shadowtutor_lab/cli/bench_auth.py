"""``shadowtutor bench auth-flood``: bad bearer tokens in bulk, and an authenticated edge's WELCOME and key
frames meanwhile (``shadowtutor_lab.stress.auth_flood``)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from shadowtutor_lab.cli.options import invoked_command, positive_int


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "auth-flood",
        help="made-up bearer tokens from 40 clients on one address, then on four: an edge's WELCOME and an open "
        "session's key-frame turnaround against the quiet ones (local server on loopback)",
    )
    p.add_argument("--out", type=Path, default=Path("auth-flood"), help="directory for the server log and the "
                   "JSON result (default auth-flood)")
    p.add_argument("--clients", type=positive_int, default=40, help="flood clients per flood (default 40)")
    p.add_argument("--admins", type=positive_int, default=3, help="administrators in the tokens file (default 3)")
    p.add_argument("--samples", type=positive_int, default=20,
                   help="WELCOMEs and key frames measured per phase (default 20)")
    p.add_argument("--cache-dir", type=Path, help="scene cache (default ~/.cache/shadowtutor/scenes)")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from shadowtutor_lab.stress.auth_flood import FloodConfig, FloodPlan, run_auth_flood

    floods = (FloodPlan("one_address", args.clients, ("127.0.0.1",)),
              FloodPlan("four_addresses", args.clients, tuple(f"127.0.0.{n}" for n in range(2, 6))))
    config = FloodConfig(args.out, floods, admins=args.admins, samples=args.samples, cache_dir=args.cache_dir)
    result = {"command": invoked_command(args), **run_auth_flood(config)}
    text = json.dumps(result, indent=2)
    (args.out / "auth_flood.json").write_text(text + "\n")
    print(text)
    return 0 if result["passed"] else 1
