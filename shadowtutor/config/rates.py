"""Bit rates as people write them: ``300kbps``, ``1.5Mbps``, ``80 Mbit/s`` (SI prefixes)."""

from __future__ import annotations

import re

_RATE = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*([kmg]?)(bps|bit/s|b/s)\s*$", re.IGNORECASE)
_RATE_SCALE = {"": 1.0, "k": 1e3, "m": 1e6, "g": 1e9}


def parse_rate(text: str) -> float:
    """Bits per second, > 0, from ``300kbps``, ``1.5Mbps`` or ``80 Mbit/s``; ValueError
    otherwise."""
    match = _RATE.match(text)
    if not match or float(match[1]) <= 0:
        raise ValueError(f"expected a bit rate > 0 such as 300kbps or 1.5Mbps, got {text!r}")
    return float(match[1]) * _RATE_SCALE[match[2].lower()]


def format_rate(bps: float) -> str:
    """``bps`` with three significant digits and an SI prefix: ``300 kbit/s``."""
    for prefix, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if bps >= scale:
            return f"{bps / scale:.3g} {prefix}bit/s"
    return f"{bps:.3g} bit/s"
