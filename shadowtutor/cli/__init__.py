"""The ``shadowtutor`` console script: one subcommand per job.

Each command module exposes ``register(subparsers)``; modules import their heavy
dependencies inside their handlers so that ``shadowtutor --help`` stays fast.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from collections.abc import Sequence

COMMAND_MODULES = (
    "shadowtutor.cli.bounds",
    "shadowtutor.cli.scenes",
    "shadowtutor.cli.pretrain",
    "shadowtutor.cli.bench",
    "shadowtutor.cli.teacher",
    "services.cli",
    "edge_agent.cli",
    "shadowtutor.cli.tokens",
    "shadowtutor.cli.demo",
    "shadowtutor.cli.fuzz",
    "shadowtutor.cli.change_based",
    "shadowtutor.cli.regions",
    "shadowtutor.cli.evaluate",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="shadowtutor", description=__doc__.splitlines()[0])
    parser.add_argument("--log-level", default="INFO", help="logging level (default INFO)")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    arguments = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(arguments)
    args.argv = arguments
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        return int(args.handler(args) or 0)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except (ValueError, FileNotFoundError, RuntimeError) as exc:
        print(f"shadowtutor {args.command}: error: {exc}", file=sys.stderr)
        return 2
