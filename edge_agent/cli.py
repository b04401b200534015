"""``shadowtutor edge``: run the edge agent (flags, or ``SHADOWTUTOR_*`` environment variables)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import signal
import sys

from edge_agent.settings import BOOLEAN_SETTINGS, EdgeSettings, env_var


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "edge",
        help="run the edge agent: the student on every frame, key frames to the server",
        description="Each flag can also be given as the environment variable named in its help; a flag wins.",
    )
    for f in dataclasses.fields(EdgeSettings):
        flag = "--" + f.name.replace("_", "-")
        text = f"{f.metadata['help']} [{env_var(f.name)}]"
        if f.name in BOOLEAN_SETTINGS:
            p.add_argument(flag, dest=f.name, action=argparse.BooleanOptionalAction, default=None, help=text)
        else:
            p.add_argument(flag, dest=f.name, default=None, metavar=f.name.upper(), help=text)
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from edge_agent.agent import EdgeAgent

    agent = EdgeAgent(EdgeSettings.from_sources(vars(args), os.environ))

    def stop(signum: int, _frame: object) -> None:
        print(f"shadowtutor edge: {signal.Signals(signum).name}: finishing the current frame", file=sys.stderr)
        signal.signal(signal.SIGINT, signal.default_int_handler)  # a second Ctrl-C interrupts at once
        agent.request_stop()

    previous = {signum: signal.signal(signum, stop) for signum in (signal.SIGINT, signal.SIGTERM)}
    try:
        summary = agent.run()
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    print(json.dumps(summary.to_dict()))
    return 0
