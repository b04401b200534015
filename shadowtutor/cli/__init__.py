"""The ``shadowtutor`` console script: one subcommand per job.

Each command module exposes ``register(subparsers)``; modules import their heavy
dependencies inside their handlers so that ``shadowtutor --help`` stays fast. The product's
commands come first, in :data:`COMMAND_MODULES`' order; then every module named in the
entry-point group :data:`PLUGIN_GROUP` (the lab's benchmarks and studies, where installed), in
the order of the entry points' names; then the ``extra_modules`` a caller names (a package run from
its source folder, whose entry points are not installed). Each module registers once.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from collections.abc import Sequence
from importlib.metadata import entry_points

from shadowtutor.version import package_version

COMMAND_MODULES = (
    "shadowtutor.cli.teacher",
    "services.cli",
    "edge_agent.cli",
    "shadowtutor.cli.tokens",
)
PLUGIN_GROUP = "shadowtutor.commands"


def plugin_modules() -> list[str]:
    """The module names of the entry points in :data:`PLUGIN_GROUP`, sorted by entry-point name
    (then by module name), each once; empty where no installed distribution declares the group."""
    found = sorted({(entry.name, entry.value) for entry in entry_points(group=PLUGIN_GROUP)})
    return list(dict.fromkeys(module for _, module in found))


def build_parser(extra_modules: Sequence[str] = ()) -> argparse.ArgumentParser:
    """The whole command line: the product's commands, the plugins', then ``extra_modules``' (see
    the module's docstring)."""
    parser = argparse.ArgumentParser(prog="shadowtutor", description=__doc__.splitlines()[0])
    parser.add_argument("--log-level", default="INFO", help="logging level (default INFO)")
    parser.add_argument(
        "--version",
        action="version",
        version=f"%(prog)s {package_version()}",
        help="print the installed version and exit",
    )
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in dict.fromkeys((*COMMAND_MODULES, *plugin_modules(), *extra_modules)):
        importlib.import_module(name).register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None, extra_modules: Sequence[str] = ()) -> int:
    """Parse ``argv`` (default: the process's arguments) and run its command; the exit status."""
    parser = build_parser(extra_modules)
    arguments = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(arguments)
    args.argv = arguments
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    try:
        return int(args.handler(args) or 0)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except (ValueError, FileNotFoundError, RuntimeError) as exc:
        print(f"shadowtutor {args.command}: error: {exc}", file=sys.stderr)
        return 2
