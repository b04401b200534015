"""``shadowtutor edge``: run the edge agent (flags, or ``SHADOWTUTOR_*`` environment variables).

Every :class:`~edge_agent.settings.EdgeSettings` field is a flag (``--wait-timeout`` for
``wait_timeout``), built the same way as the server's (:mod:`shadowtutor.config.settings_flags`).
"""

from __future__ import annotations

import argparse
import json
import signal
import sys

from edge_agent.settings import EdgeSettings
from shadowtutor.config.settings_flags import add_settings_flags, given_flags

DEST_PREFIX = "edge_"


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "edge",
        help="run the edge agent: the student on every frame, key frames to the server",
        description="Run the edge agent. Every flag can also be given as the environment variable "
        "named in its help; a flag wins.",
    )
    add_settings_flags(p, EdgeSettings, DEST_PREFIX)
    p.set_defaults(handler=run)


def settings_from_args(args: argparse.Namespace) -> EdgeSettings:
    """Settings from the environment, overridden by the flags that were given (a SettingsError if
    bad)."""
    return EdgeSettings(**given_flags(args, DEST_PREFIX))


def run(args: argparse.Namespace) -> int:
    from edge_agent.agent import EdgeAgent

    agent = EdgeAgent(settings_from_args(args))

    def stop(signum: int, _frame: object) -> None:
        print(
            f"shadowtutor edge: {signal.Signals(signum).name}: finishing the current frame",
            file=sys.stderr,
        )
        # a second Ctrl-C interrupts at once
        signal.signal(signal.SIGINT, signal.default_int_handler)
        agent.request_stop()

    previous = {signum: signal.signal(signum, stop) for signum in (signal.SIGINT, signal.SIGTERM)}
    try:
        summary = agent.run()
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    print(json.dumps(summary.to_dict()))
    return 0
