"""Argument types shared by several commands."""

from __future__ import annotations

import argparse


def frame_size(text: str) -> tuple[int, int]:
    """``WxH`` -> ``(W, H)``, both positive."""
    try:
        width, height = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected WIDTHxHEIGHT such as 640x360, got {text!r}") from None
    if width <= 0 or height <= 0:
        raise argparse.ArgumentTypeError(f"width and height must be positive, got {text!r}")
    return width, height


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def invoked_command(args: argparse.Namespace) -> str:
    """The command line that was parsed into ``args``, as ``shadowtutor ...`` (for reports)."""
    import shlex

    return shlex.join(["shadowtutor", *args.argv])
