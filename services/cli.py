"""``shadowtutor serve``: run the server under uvicorn.

Every :class:`~services.server.settings.ServerSettings` field is a flag (``--max-sessions``
for ``max_sessions``); a flag given wins over its ``SHADOWTUTOR_*`` environment variable.
"""

from __future__ import annotations

import argparse
import logging
from typing import Any

from services.server.settings import ENV_PREFIX, ServerSettings

DEST_PREFIX = "serve_"


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "serve",
        help="run the ShadowTutor server (WebSocket /v1/edge, REST, /metrics)",
        description="Run the ShadowTutor server under uvicorn. Every flag can also be given as the "
        "environment variable named in its help; a flag wins.",
    )
    for name, field in ServerSettings.model_fields.items():
        p.add_argument(
            "--" + name.replace("_", "-"),
            dest=DEST_PREFIX + name,
            default=argparse.SUPPRESS,
            metavar=name.upper(),
            help=f"{field.description} [env {ENV_PREFIX}{name.upper()}{_default_text(field)}]",
        )
    p.set_defaults(handler=run_serve)


def _default_text(field: Any) -> str:
    default = field.get_default(call_default_factory=True)
    return "" if default is None or default == {} else f"; default {default}"


def settings_from_args(args: argparse.Namespace) -> ServerSettings:
    """Settings from the environment, overridden by the flags that were given."""
    from pydantic import ValidationError

    given = {
        key[len(DEST_PREFIX):]: value for key, value in vars(args).items() if key.startswith(DEST_PREFIX)
    }
    try:
        return ServerSettings(**given)
    except ValidationError as exc:
        raise ValueError(f"bad server settings:\n{exc}") from None


def run_serve(args: argparse.Namespace) -> int:
    import uvicorn

    from services.server.app import create_app

    settings = settings_from_args(args)
    logging.getLogger().setLevel(settings.log_level.upper())
    uvicorn.run(
        create_app(settings),
        host=settings.host,
        port=settings.port,
        log_level=settings.log_level,
        ws_max_size=settings.max_message_bytes,
        timeout_graceful_shutdown=10,
    )
    return 0
