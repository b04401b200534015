"""``shadowtutor token``: issue, revoke and list the tokens in the server's tokens file.

``new`` prints the new token once on stdout (nothing else there, so that ``$(...)`` captures
it) and stores only its salted hash; a running server rereads the file within
``tokens_poll_seconds`` (or at once on SIGHUP), so no restart is needed.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

TOKENS_FILE_ENV = "SHADOWTUTOR_TOKENS_FILE"


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "token",
        help="issue, revoke and list edge and admin tokens (the server's --tokens-file)",
        description="Manage the server's tokens file: hashed tokens, one per edge id, and "
        "administrators' tokens.",
    )
    actions = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    for name, help_text in (
        ("new", "make a token, print it once, store its hash (replacing the name's earlier token)"),
        ("revoke", "revoke the name's token: refused at once, and its open session is closed"),
        ("list", "the names in the file and whether each is active (never a hash or token)"),
    ):
        action = actions.add_parser(name, help=help_text, description=help_text)
        action.add_argument(
            "--tokens-file",
            type=Path,
            default=None,
            help=f"the tokens file [env {TOKENS_FILE_ENV}]",
        )
        if name != "list":
            who = action.add_mutually_exclusive_group(required=True)
            who.add_argument("--edge-id", help="an edge's id (the HELLO's edge_id)")
            who.add_argument(
                "--admin", metavar="NAME", help="an administrator (bearer token for /v1/sessions)"
            )
        action.set_defaults(handler=run)


def _tokens_file(args: argparse.Namespace) -> Path:
    path = args.tokens_file or (
        Path(os.environ[TOKENS_FILE_ENV]) if os.environ.get(TOKENS_FILE_ENV) else None
    )
    if path is None:
        raise ValueError(f"no tokens file: pass --tokens-file or set {TOKENS_FILE_ENV}")
    return path


def run(args: argparse.Namespace) -> int:
    from services.server.access import tokens

    path = _tokens_file(args)
    if args.action == "list":
        table = tokens.read_table(path)
        for kind in tokens.KINDS:
            for name, entry in sorted(table.entries(kind).items()):
                state = "active" if entry.active else f"revoked {entry.revoked or ''}".strip()
                print(f"{kind[:-1]}\t{name}\t{state}\t{entry.updated or ''}")
        return 0
    kind, name = ("edges", args.edge_id) if args.edge_id is not None else ("admins", args.admin)
    if args.action == "new":
        token = tokens.issue_token(path, kind, name)
        print(token)
        print(
            f"stored the hash of the new token of {kind[:-1]} {name!r} in {path}; the token is "
            "not shown again",
            file=sys.stderr,
        )
    else:
        tokens.revoke(path, kind, name)
        print(f"revoked {kind[:-1]} {name!r} in {path}", file=sys.stderr)
    return 0
