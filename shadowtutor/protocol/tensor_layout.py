"""What a tensor blob may name, checked before any of it is decompressed (docs/security.md,
"Weight updates from the server").

A :data:`Layout` maps each tensor a receiver holds (or can hold) to its shape. A blob's
descriptors are checked against it first, so the memory a blob can take is bounded by the
tensors the receiver really has, not by what the blob declares; its zstd frame is then read with
that bound (:func:`decompress_at_most`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import zstandard

from shadowtutor.protocol.errors import ErrorCode, ProtocolError

Layout = Mapping[str, tuple[int, ...]]
# what a blob may decompress to when no layout bounds it
MAX_DECOMPRESSED_BYTES = 256 * 1024 * 1024
# zstd's smallest window
_MIN_WINDOW = 1 << 10
_CHUNK = 1 << 20


def layout_of(state: Mapping[str, Any]) -> dict[str, tuple[int, ...]]:
    """The layout of a ``state_dict``-like mapping of tensors (anything with ``.shape``)."""
    return {name: tuple(value.shape) for name, value in state.items()}


def element_count(layout: Layout) -> int:
    """The number of values of all tensors of ``layout`` together."""
    return sum(math.prod(shape) for shape in layout.values())


def parse_descriptors(
    tensors: list[dict[str, Any]], layout: Layout | None = None, *, complete: bool = False
) -> list[tuple[str, tuple[int, ...]]]:
    """``(name, shape)`` of each descriptor, in order.

    Raises BAD_MESSAGE for a malformed or repeated descriptor and, with ``layout``, for a name
    it lacks or a shape other than its own; with ``complete`` too, unless the descriptors name
    every tensor of ``layout``. Nothing is allocated past the descriptors themselves.
    """
    shapes: dict[str, tuple[int, ...]] = {}
    for desc in tensors:
        name, shape = (
            (desc.get("name"), desc.get("shape")) if isinstance(desc, dict) else (None, None)
        )
        if (
            not isinstance(name, str)
            or not isinstance(shape, list)
            or not all(
                isinstance(d, int) and not isinstance(d, bool) and 0 <= d < 2**31 for d in shape
            )
        ):
            raise ProtocolError(ErrorCode.BAD_MESSAGE, f"bad tensor descriptor {desc!r}"[:300])
        if name in shapes:
            raise ProtocolError(
                ErrorCode.BAD_MESSAGE, f"tensor {name[:100]!r} appears twice in the blob"
            )
        if layout is not None and layout.get(name) != tuple(shape):
            raise ProtocolError(
                ErrorCode.BAD_MESSAGE,
                f"the blob names {name[:100]!r} with shape {shape[:8]}, which is not a held "
                "tensor of that shape",
            )
        shapes[name] = tuple(shape)
    if complete and layout is not None and len(shapes) != len(layout):
        missing = [name for name in layout if name not in shapes]
        raise ProtocolError(
            ErrorCode.BAD_MESSAGE, f"full weights without {missing[:3]} ({len(missing)} missing)"
        )
    return list(shapes.items())


def decompress_at_most(payload: bytes, limit: int, what: str) -> bytes:
    """At most ``limit + 1`` bytes out of the zstd frame ``payload`` (so a caller sees that it
    holds more than ``limit``), with a window of at most ``limit`` rounded up to a power of two:
    no more memory than that, whatever the frame declares. BAD_MESSAGE if it is not zstd or asks
    for a larger window."""
    window = max(_MIN_WINDOW, 1 << max(limit - 1, 0).bit_length())
    chunks, size = [], 0
    try:
        decompressor = zstandard.ZstdDecompressor(max_window_size=window)
        with decompressor.stream_reader(payload) as reader:
            while size <= limit:
                chunk = reader.read(min(_CHUNK, limit + 1 - size))
                if not chunk:
                    break
                chunks.append(chunk)
                size += len(chunk)
    except zstandard.ZstdError as exc:
        raise ProtocolError(
            ErrorCode.BAD_MESSAGE, f"{what} is not zstd within {limit} bytes: {exc}"
        ) from None
    return b"".join(chunks)
