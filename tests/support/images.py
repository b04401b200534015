"""Hostile images for tests: a tiny PNG that declares a huge size (a "decompression bomb")."""

from __future__ import annotations

import struct
import zlib


def png_bomb(width: int, height: int) -> bytes:
    """A valid PNG signature and IHDR declaring ``width`` x ``height`` RGB pixels, then a few compressed bytes."""
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    chunk = struct.pack(">I", 13) + b"IHDR" + ihdr + struct.pack(">I", zlib.crc32(b"IHDR" + ihdr))
    data = zlib.compress(b"\0" * 10_000)
    idat = struct.pack(">I", len(data)) + b"IDAT" + data + struct.pack(">I", zlib.crc32(b"IDAT" + data))
    return b"\x89PNG\r\n\x1a\n" + chunk + idat
