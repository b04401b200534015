"""UPDATE blobs a man in the middle could send an edge: about 8 kB on the wire, 256 MiB once
decompressed, naming a tensor the edge does not hold. Built by streaming zeros through zstd, so
making one costs no more memory than the bomb itself on the wire."""

from __future__ import annotations

import struct
from typing import Any

import zstandard

# just under the 256 MiB global bound, so that a decoder bounded only by it accepts the size
BOMB_BYTES = 256 * 1024 * 1024 - 1024
UNHELD = "evil.weight"
_CHUNK = 1 << 20


def _zstd_of_zeros(prefix: bytes, zeros: int, suffix: bytes) -> bytes:
    compressor = zstandard.ZstdCompressor(level=3).compressobj(size=len(prefix) + zeros + len(suffix))
    parts = [compressor.compress(prefix)]
    chunk = bytes(_CHUNK)
    left = zeros
    while left:
        step = min(left, _CHUNK)
        parts.append(compressor.compress(chunk[:step]))
        left -= step
    parts.append(compressor.compress(suffix))
    parts.append(compressor.flush())
    return b"".join(parts)


def sparse_bomb() -> tuple[list[dict[str, Any]], bytes]:
    """A ``q4sparse+zstd`` update carrying a coordinate set over :data:`UNHELD`, whose all-zero bitmap
    is :data:`BOMB_BYTES` long (one scale, no values follow)."""
    count = BOMB_BYTES * 8
    header = struct.pack("<BI", 1, 7)
    scale = struct.pack("<f", 0.0)
    return [{"name": UNHELD, "shape": [count // 4, 4]}], _zstd_of_zeros(header, BOMB_BYTES, scale)


def dense_bomb() -> tuple[list[dict[str, Any]], bytes]:
    """A ``q8delta+zstd`` update of :data:`UNHELD`, a tensor of :data:`BOMB_BYTES` int8 deltas (one
    zero scale first)."""
    return [{"name": UNHELD, "shape": [BOMB_BYTES]}], _zstd_of_zeros(struct.pack("<f", 0.0), BOMB_BYTES, b"")
