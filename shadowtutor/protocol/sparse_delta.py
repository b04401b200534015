"""Sparse delta codecs: quantised deltas of a chosen coordinate set (docs/protocol.md, "Sparse
deltas").

A :class:`CoordinateSet` names, per tensor, the flat indices the server trains; it has an id and
travels once, in the first update that uses it, as one bitmap per tensor. Later updates carry only
the set's id, one float32 scale per tensor of the set and one quantised delta per coordinate:
int8 (``q8sparse+zstd``) or int4 packed two per byte, low nibble first (``q4sparse+zstd``).

Payload, one zstd frame of::

    u8 flags (bit 0: a set follows)   u32 set id
    [set: per tensor of the descriptors, ceil(n/8) bytes, np.packbits little bit order]
    f32 scale per tensor of the set   values, in the set's tensor order and ascending index order

An update carries descriptors (name, shape) exactly when it carries a set. An empty payload is an
update that changes nothing. Any defect raises :class:`ProtocolError` (BAD_MESSAGE, TOO_LARGE).
"""

from __future__ import annotations

import math
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import zstandard

from shadowtutor.protocol.errors import ErrorCode, ProtocolError
from shadowtutor.protocol.tensor_layout import (
    MAX_DECOMPRESSED_BYTES,
    Layout,
    decompress_at_most,
    parse_descriptors,
)

SPARSE_BITS = {"q8sparse+zstd": 8, "q4sparse+zstd": 4}
_HEADER = struct.Struct("<BI")
_SET_FOLLOWS = 1
_SCALE = np.dtype("<f4")
_ZSTD_LEVEL = 3


def _bad(message: str) -> ProtocolError:
    return ProtocolError(ErrorCode.BAD_MESSAGE, message)


def is_sparse_codec(codec: str) -> bool:
    return codec in SPARSE_BITS


@dataclass(frozen=True)
class CoordinateSet:
    """``indices``: per tensor name, its chosen flat indices (int64, ascending, unique), in set
    order; ``shapes``: each tensor's shape; ``set_id``: the id updates refer to it by
    (0..2**32-1)."""

    set_id: int
    shapes: dict[str, tuple[int, ...]]
    indices: dict[str, torch.Tensor]

    @property
    def size(self) -> int:
        return sum(int(idx.numel()) for idx in self.indices.values())

    @classmethod
    def from_masks(cls, set_id: int, masks: Mapping[str, torch.Tensor]) -> CoordinateSet:
        """The set of the True entries of boolean ``masks`` (by tensor name, in their order)."""
        return cls(
            set_id % 2**32,
            {name: tuple(mask.shape) for name, mask in masks.items()},
            {
                name: torch.nonzero(mask.reshape(-1).cpu()).reshape(-1)
                for name, mask in masks.items()
            },
        )


def largest_masks(scores: Mapping[str, torch.Tensor], count: int) -> dict[str, torch.Tensor]:
    """Boolean masks, one per tensor of ``scores`` (its shape and device), that hold the ``count``
    (1..all) largest scores of all the tensors together: one global top-k over their values in
    order."""
    flat = torch.cat([score.reshape(-1) for score in scores.values()])
    chosen = torch.zeros(flat.numel(), dtype=torch.bool, device=flat.device)
    chosen[torch.topk(flat, count, sorted=False).indices] = True
    masks, start = {}, 0
    for name, score in scores.items():
        masks[name] = chosen[start : start + score.numel()].view(score.shape)
        start += score.numel()
    return masks


@dataclass(frozen=True)
class SparseDelta:
    """A decoded sparse update: ``coordinates`` (the set it carried, or None: the held one,
    ``set_id``), ``deltas`` float32, one per coordinate of the set in its order (None: no change at
    all)."""

    set_id: int
    coordinates: CoordinateSet | None
    deltas: torch.Tensor | None


def _quantise(delta: np.ndarray, bits: int) -> tuple[np.float32, np.ndarray]:
    q_max = 2 ** (bits - 1) - 1
    scale = np.float32(np.abs(delta).max(initial=0.0) / np.float32(q_max))
    divisor = scale if scale > 0 else np.float32(1)
    return scale, np.clip(np.rint(delta / divisor), -q_max, q_max).astype(np.int8)


def _pack(values: np.ndarray, bits: int) -> bytes:
    if bits == 8:
        return values.tobytes()
    nibbles = values.astype(np.uint8) & 0x0F
    if nibbles.size % 2:
        nibbles = np.append(nibbles, np.uint8(0))
    return (nibbles[0::2] | (nibbles[1::2] << 4)).astype(np.uint8).tobytes()


def _signed_nibbles() -> np.ndarray:
    """Each byte's two int4 values, low nibble first, as one int16 per byte (native order): taking
    a packed block's bytes from it and viewing the result as int8 unpacks the block."""
    low, high = np.arange(256) & 0x0F, np.arange(256) >> 4
    table = np.stack([low, high], axis=1)
    pairs = np.ascontiguousarray(np.where(table > 7, table - 16, table).astype(np.int8))
    return pairs.view(np.int16).reshape(-1)


_NIBBLES = _signed_nibbles()


def _unpack(data: bytes, count: int, bits: int) -> np.ndarray:
    if bits == 8:
        return np.frombuffer(data, dtype=np.int8, count=count)
    packed = np.frombuffer(data, dtype=np.uint8)
    if count % 2 and packed.size and packed[-1] >> 4:
        raise _bad("the padding nibble of an odd int4 value block is not zero")
    return _NIBBLES.take(packed).view(np.int8)[:count]


def _value_bytes(count: int, bits: int) -> int:
    return count if bits == 8 else (count + 1) // 2


def encode_sparse(
    deltas: torch.Tensor | None, coordinates: CoordinateSet, codec: str, with_set: bool
) -> tuple[list[dict[str, Any]], bytes]:
    """``(descriptors, payload)`` of an update for an edge; ``deltas``: float32, one per coordinate
    of ``coordinates`` in its order (None: no change, an empty payload unless ``with_set``)."""
    bits = SPARSE_BITS[codec]
    if deltas is None and not with_set:
        return [], b""
    parts = [_HEADER.pack(_SET_FOLLOWS if with_set else 0, coordinates.set_id)]
    descriptors: list[dict[str, Any]] = []
    if with_set:
        for name, shape in coordinates.shapes.items():
            descriptors.append({"name": name, "shape": list(shape)})
            mask = np.zeros(math.prod(shape), dtype=bool)
            mask[coordinates.indices[name].numpy()] = True
            parts.append(np.packbits(mask, bitorder="little").tobytes())
    flat = (
        np.zeros(coordinates.size, np.float32)
        if deltas is None
        else deltas.detach().cpu().numpy().astype(np.float32, copy=False)
    )
    if not np.isfinite(flat).all():
        raise ValueError("cannot quantise a delta holding NaN or infinity")
    scales, values, start = [], [], 0
    for idx in coordinates.indices.values():
        scale, quantised = _quantise(flat[start : start + idx.numel()], bits)
        scales.append(scale)
        values.append(quantised)
        start += idx.numel()
    parts.append(np.asarray(scales, dtype=_SCALE).tobytes())
    parts.append(_pack(np.concatenate(values) if values else np.zeros(0, np.int8), bits))
    return descriptors, zstandard.ZstdCompressor(level=_ZSTD_LEVEL).compress(b"".join(parts))


def _read_set(
    set_id: int, shapes: list[tuple[str, tuple[int, ...]]], raw: bytes, at: int
) -> tuple[CoordinateSet, int]:
    indices: dict[str, torch.Tensor] = {}
    for name, shape in shapes:
        count = math.prod(shape)
        size = (count + 7) // 8
        if at + size > len(raw):
            raise _bad(f"the coordinate bitmap of {name!r} is cut short")
        bits = np.unpackbits(np.frombuffer(raw, np.uint8, size, at), bitorder="little")
        if bits[count:].any():
            raise _bad(f"the coordinate bitmap of {name!r} sets bits past its {count} entries")
        indices[name] = torch.from_numpy(np.flatnonzero(bits[:count]).astype(np.int64))
        at += size
    return CoordinateSet(set_id, dict(shapes), indices), at


def _largest(
    shapes: list[tuple[str, tuple[int, ...]]], held: CoordinateSet | None, bits: int
) -> int:
    """The most bytes a payload can decompress to: a set over all of ``shapes`` with every
    coordinate chosen, or (no ``shapes``) deltas for the ``held`` set."""
    if shapes:
        counts = [math.prod(shape) for _, shape in shapes]
        bitmaps = sum((count + 7) // 8 for count in counts)
        return (
            _HEADER.size + bitmaps + len(counts) * _SCALE.itemsize + _value_bytes(sum(counts), bits)
        )
    if held is None:
        raise _bad("a sparse update without a coordinate set, and the edge holds none")
    return _HEADER.size + len(held.indices) * _SCALE.itemsize + _value_bytes(held.size, bits)


def decode_sparse(
    descriptors: list[dict[str, Any]],
    payload: bytes,
    codec: str,
    held: CoordinateSet | None,
    layout: Layout | None = None,
) -> SparseDelta:
    """Inverse of :func:`encode_sparse` for an edge holding the set ``held`` (None: none yet).

    An update that refers to a set other than the held one, or carries descriptors without a set
    (or a set without descriptors), raises BAD_MESSAGE. The descriptors are checked against
    ``layout`` (the tensors the edge holds) when given, and the payload is decompressed to at
    most what they (or the held set) can need, before any bitmap is unpacked: TOO_LARGE when
    that is over :data:`MAX_DECOMPRESSED_BYTES`."""
    bits = SPARSE_BITS.get(codec)
    if bits is None:
        raise ProtocolError(ErrorCode.UNSUPPORTED_CODEC, f"{codec!r} is not a sparse codec")
    if not payload:
        if descriptors:
            raise _bad("an empty sparse update names tensors")
        return SparseDelta(held.set_id if held is not None else 0, None, None)
    shapes = parse_descriptors(descriptors, layout)
    limit = _largest(shapes, held, bits)
    if limit > MAX_DECOMPRESSED_BYTES:
        raise ProtocolError(
            ErrorCode.TOO_LARGE,
            f"a sparse blob of up to {limit} bytes exceeds {MAX_DECOMPRESSED_BYTES}",
        )
    raw = decompress_at_most(payload, limit, "sparse weight payload")
    if len(raw) > limit:
        raise _bad(f"sparse update of over {limit} bytes, its coordinate set needs at most that")
    if len(raw) < _HEADER.size:
        raise _bad("sparse update shorter than its header")
    flags, set_id = _HEADER.unpack_from(raw)
    if flags & ~_SET_FOLLOWS:
        raise _bad(f"sparse update with unknown flags {flags:#x}")
    carried = bool(flags & _SET_FOLLOWS)
    if carried != bool(descriptors):
        raise _bad("a sparse update names tensors exactly when it carries a coordinate set")
    at = _HEADER.size
    if carried:
        coordinates, at = _read_set(set_id, shapes, raw, at)
    elif held is None or held.set_id != set_id:
        holding = None if held is None else held.set_id
        raise _bad(f"sparse update for coordinate set {set_id}, the edge holds set {holding}")
    else:
        coordinates = held
    n_scales, count = len(coordinates.indices), coordinates.size
    expected = at + n_scales * _SCALE.itemsize + _value_bytes(count, bits)
    if len(raw) != expected:
        raise _bad(f"sparse update of {len(raw)} bytes, its coordinate set needs {expected}")
    scales = np.frombuffer(raw, _SCALE, n_scales, at)
    if not ((scales >= 0) & (scales <= np.finfo(np.float32).max / 128)).all():
        raise _bad(
            "a sparse delta scale is negative, NaN, infinite or so large that values overflow"
        )
    values = _unpack(raw[at + n_scales * _SCALE.itemsize :], count, bits)
    sizes = [int(idx.numel()) for idx in coordinates.indices.values()]
    per_value = np.repeat(scales, sizes) if sizes else np.zeros(0, _SCALE)
    deltas = torch.from_numpy(values.astype(np.float32) * per_value)
    return SparseDelta(set_id, coordinates if carried else None, deltas)
