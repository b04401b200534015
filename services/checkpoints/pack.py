"""A session checkpoint's record in compact bytes: tensors as byte planes, all zstd-compressed.

:func:`pack_tensor` turns a tensor into a 1-d ``uint8`` tensor of its bytes grouped by position in
the element (all first bytes, then all second bytes...), optionally XORed with a reference
tensor's bytes first: values close to the reference share their sign, exponent and high mantissa
bytes, which then compress to almost nothing. :func:`unpack_tensor` is its exact inverse, for a
tensor of a known shape and dtype only. :func:`archive` saves a record with ``torch.save`` and
compresses it with zstd; :func:`unarchive` reads it back bounded: at most ``limit`` bytes stored
and inflated, ``torch.load`` with ``weights_only``. Every refusal is a
:class:`CheckpointFormatError` of one line. Lossless: the training a checkpoint restores is bit
for bit the one it was taken from.
"""

from __future__ import annotations

import io
from collections.abc import Mapping
from typing import Any

import torch
import zstandard

from services.checkpoints.checks import (
    MAX_CHECKPOINT_BYTES,
    CheckpointFormatError,
    check_archive,
)

ZSTD_LEVEL = 3
# how every checkpoint written before the compact form begins (a plain torch.save zip archive)
_ZIP = b"PK\x03\x04"
_CHUNK = 1 << 20


def _bytes_of(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor``'s bytes as a ``(numel, element size)`` uint8 tensor (a CPU copy)."""
    flat = tensor.detach().to("cpu").contiguous().reshape(-1)
    return flat.view(torch.uint8).reshape(flat.numel(), flat.element_size())


def pack_tensor(tensor: torch.Tensor, reference: torch.Tensor | None = None) -> torch.Tensor:
    """``tensor``'s bytes as byte planes (XORed with ``reference``'s, of the same shape and dtype,
    when given)."""
    planes = _bytes_of(tensor)
    if reference is not None:
        if reference.shape != tensor.shape or reference.dtype != tensor.dtype:
            raise ValueError("a reference tensor of another shape or dtype")
        planes = torch.bitwise_xor(planes, _bytes_of(reference))
    return planes.t().contiguous().reshape(-1)


def unpack_tensor(
    what: str, packed: Any, like: torch.Tensor, reference: torch.Tensor | None = None
) -> torch.Tensor:
    """The tensor of ``like``'s shape and dtype that :func:`pack_tensor` made ``packed`` from (with
    the same ``reference``); :class:`CheckpointFormatError` unless ``packed`` is a 1-d uint8 tensor
    of its size."""
    count, width = like.numel(), like.element_size()
    if (
        not isinstance(packed, torch.Tensor)
        or packed.dtype != torch.uint8
        or packed.dim() != 1
        or (packed.numel() != count * width)
    ):
        shown = (
            f"{tuple(packed.shape)} {packed.dtype}"
            if isinstance(packed, torch.Tensor)
            else type(packed).__name__
        )
        raise CheckpointFormatError(
            f"{what} is {shown}, the student's is {tuple(like.shape)} {like.dtype} (packed: "
            f"{count * width} uint8)"
        )
    planes = packed.reshape(width, count).t().contiguous()
    if reference is not None:
        planes = torch.bitwise_xor(planes, _bytes_of(reference))
    return planes.reshape(-1).view(like.dtype).reshape(like.shape).clone()


def unpack_tensors(
    what: str,
    given: Any,
    expected: Mapping[str, torch.Tensor],
    references: Mapping[str, torch.Tensor] | None = None,
    *,
    subset: bool = False,
) -> dict[str, torch.Tensor]:
    """:func:`unpack_tensor` over a mapping that names exactly ``expected``'s keys (``subset``: some
    of them),
    each unpacked as its expected tensor, against its reference where ``references`` are given."""
    if not isinstance(given, dict):
        raise CheckpointFormatError(f"{what}: not a mapping of tensors")
    missing = [] if subset else sorted(set(expected) - set(given))
    extra = sorted(str(k) for k in set(given) - set(expected))
    if missing or extra:
        raise CheckpointFormatError(
            f"{what}: keys differ from the student's (missing {missing[:3]}, unknown "
            f"{[k[:40] for k in extra[:3]]})"
        )
    return {
        key: unpack_tensor(
            f"{what}: {key}", value, expected[key], None if references is None else references[key]
        )
        for key, value in given.items()
    }


def archive(record: Any) -> bytes:
    """``record`` as stored: ``torch.save``'s archive, zstd-compressed."""
    buffer = io.BytesIO()
    torch.save(record, buffer)
    return zstandard.ZstdCompressor(level=ZSTD_LEVEL).compress(buffer.getvalue())


def unarchive(data: bytes, limit: int = MAX_CHECKPOINT_BYTES) -> Any:
    """The record :func:`archive` stored in ``data``, read with at most ``limit`` bytes stored and
    inflated."""
    if data.startswith(_ZIP):
        raise CheckpointFormatError("a checkpoint of an earlier release (format 1), not read")
    if len(data) > limit:
        raise CheckpointFormatError(f"{len(data)} bytes (at most {limit})")
    inflated = io.BytesIO()
    try:
        with zstandard.ZstdDecompressor().stream_reader(data) as reader:
            while chunk := reader.read(_CHUNK):
                inflated.write(chunk)
                if inflated.tell() > limit:
                    raise CheckpointFormatError(f"it inflates to more than {limit} bytes")
    except zstandard.ZstdError as exc:
        raise CheckpointFormatError(f"not a session checkpoint ({exc})"[:300]) from None
    content = inflated.getvalue()
    check_archive(content, limit)
    try:
        return torch.load(io.BytesIO(content), map_location="cpu", weights_only=True)
    except Exception as exc:
        raise CheckpointFormatError(f"not a session checkpoint: {exc}"[:300]) from None
