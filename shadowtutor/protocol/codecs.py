"""Payload codecs: frames, label maps and tensor blobs (docs/protocol.md, "Payloads")."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import cv2
import numpy as np
import torch
import zstandard

from shadowtutor.protocol.defaults import DEFAULT_FRAME_QUALITY
from shadowtutor.protocol.errors import ErrorCode, ProtocolError
from shadowtutor.protocol.sparse_delta import SPARSE_BITS
from shadowtutor.protocol.tensor_layout import (
    MAX_DECOMPRESSED_BYTES,
    Layout,
    decompress_at_most,
    parse_descriptors,
)
from shadowtutor.protocol.video_stream import STREAM_FRAME_CODECS

# Image codecs: each frame stands alone. Stream codecs: a session's frames form one stream
# (shadowtutor.protocol.video_stream), decoded in order by one decoder per session.
IMAGE_FRAME_CODECS = ("raw", "jpeg", "webp", "png")
FRAME_CODECS = IMAGE_FRAME_CODECS + STREAM_FRAME_CODECS
LABEL_CODECS = ("png", "raw")
FLOAT_WEIGHT_CODECS = ("f32", "f16", "f32+zstd", "f16+zstd")
# int8 deltas, one scale per tensor / per channel
DELTA_WEIGHT_CODECS = ("q8delta+zstd", "q8chdelta+zstd")
# deltas of a coordinate set (sparse_delta), decoded statefully
SPARSE_WEIGHT_CODECS = tuple(SPARSE_BITS)
WEIGHT_CODECS = FLOAT_WEIGHT_CODECS + DELTA_WEIGHT_CODECS + SPARSE_WEIGHT_CODECS
ZSTD_LEVEL = 3

_IMAGE_EXT = {"jpeg": ".jpg", "webp": ".webp", "png": ".png"}
_QUALITY_FLAG = {"jpeg": cv2.IMWRITE_JPEG_QUALITY, "webp": cv2.IMWRITE_WEBP_QUALITY}
_SCALE = np.dtype("<f4")
# quantised deltas lie in -127..127 (the decoder accepts -128 too)
_Q_MAX = 127
# any int8 times a scale stays finite
_MAX_SCALE = np.finfo(np.float32).max / 128


def _bad(code: ErrorCode, message: str) -> ProtocolError:
    return ProtocolError(code, message)


def choose_codec(offered: list[str], supported: tuple[str, ...], preferred: tuple[str, ...]) -> str:
    """The first of ``preferred`` that both sides support; error when none is common."""
    for codec in preferred:
        if codec in offered and codec in supported:
            return codec
    raise _bad(
        ErrorCode.UNSUPPORTED_CODEC,
        f"none of {offered} is supported; this side speaks {list(supported)}",
    )


def is_delta_codec(codec: str) -> bool:
    return codec in DELTA_WEIGHT_CODECS or codec in SPARSE_WEIGHT_CODECS


def choose_weight_codecs(offered: list[str], allowed: tuple[str, ...]) -> tuple[str, str | None]:
    """``(weight_codec, delta_codec)`` for a session (docs/protocol.md, "Codec negotiation").

    The first codec of the edge's list that ``allowed`` has decides: a float codec carries
    every blob (``delta_codec`` None); a delta codec carries partial updates, and full weights
    go in the first *float* codec of the edge's list that ``allowed`` has.
    """
    first = choose_codec(offered, allowed, tuple(offered))
    if not is_delta_codec(first):
        return first, None
    floats = tuple(c for c in allowed if c in FLOAT_WEIGHT_CODECS)
    if not any(c in floats for c in offered):
        raise _bad(
            ErrorCode.UNSUPPORTED_CODEC,
            f"{first} carries deltas only: offer a float codec for full weights too (one of "
            f"{list(floats)})",
        )
    return choose_codec(offered, floats, tuple(offered)), first


# -- frames ---------------------------------------------------------------------------------


def encode_frame(frame_bgr: np.ndarray, codec: str, quality: int | None = None) -> bytes:
    """Encode a BGR frame; ``quality`` (1..100) applies to jpeg and webp, None is
    :data:`DEFAULT_FRAME_QUALITY`."""
    if frame_bgr.dtype != np.uint8 or frame_bgr.ndim != 3 or frame_bgr.shape[2] != 3:
        raise ValueError(f"frames are uint8 (H, W, 3) BGR, got {frame_bgr.dtype} {frame_bgr.shape}")
    if codec == "raw":
        return np.ascontiguousarray(frame_bgr).tobytes()
    if codec not in _IMAGE_EXT:
        raise _bad(ErrorCode.UNSUPPORTED_CODEC, f"unknown frame codec {codec!r}")
    params = []
    if codec in _QUALITY_FLAG:
        params = [
            _QUALITY_FLAG[codec],
            int(DEFAULT_FRAME_QUALITY[codec] if quality is None else quality),
        ]
    ok, buf = cv2.imencode(_IMAGE_EXT[codec], frame_bgr, params)
    if not ok:
        raise RuntimeError(f"OpenCV could not encode a {codec} frame")
    return buf.tobytes()


def decode_frame(payload: bytes, codec: str, width: int, height: int) -> np.ndarray:
    """Decode a frame and check it is ``width`` x ``height``; defects raise BAD_FRAME."""
    if codec == "raw":
        expected = width * height * 3
        if width <= 0 or height <= 0 or len(payload) != expected:
            raise _bad(
                ErrorCode.BAD_FRAME, f"raw frame of {len(payload)} bytes, expected {expected}"
            )
        return np.frombuffer(payload, dtype=np.uint8).reshape(height, width, 3)
    if codec not in _IMAGE_EXT:
        raise _bad(ErrorCode.UNSUPPORTED_CODEC, f"unknown frame codec {codec!r}")
    image = (
        cv2.imdecode(np.frombuffer(payload, dtype=np.uint8), cv2.IMREAD_COLOR) if payload else None
    )
    if image is None:
        raise _bad(ErrorCode.BAD_FRAME, f"payload is not a decodable {codec} image")
    if image.shape[:2] != (height, width):
        raise _bad(
            ErrorCode.BAD_FRAME,
            f"frame is {image.shape[1]}x{image.shape[0]}, expected {width}x{height}",
        )
    return image


# -- label maps ----------------------------------------------------------------------------


def encode_labels(labels: np.ndarray, codec: str = "png") -> bytes:
    labels = np.ascontiguousarray(labels, dtype=np.uint8)
    if codec == "raw":
        return labels.tobytes()
    if codec == "png":
        ok, buf = cv2.imencode(".png", labels)
        if not ok:
            raise RuntimeError("OpenCV could not encode a label map")
        return buf.tobytes()
    raise _bad(ErrorCode.UNSUPPORTED_CODEC, f"unknown label codec {codec!r}")


def decode_labels(payload: bytes, codec: str, width: int, height: int) -> np.ndarray:
    if codec == "raw":
        if width <= 0 or height <= 0 or len(payload) != width * height:
            raise _bad(
                ErrorCode.BAD_FRAME,
                f"raw label map of {len(payload)} bytes, expected {width * height}",
            )
        return np.frombuffer(payload, dtype=np.uint8).reshape(height, width)
    if codec != "png":
        raise _bad(ErrorCode.UNSUPPORTED_CODEC, f"unknown label codec {codec!r}")
    labels = (
        cv2.imdecode(np.frombuffer(payload, dtype=np.uint8), cv2.IMREAD_UNCHANGED)
        if payload
        else None
    )
    if labels is None or labels.ndim != 2 or labels.shape != (height, width):
        raise _bad(
            ErrorCode.BAD_FRAME, f"payload is not a {width}x{height} single-channel PNG label map"
        )
    return labels


# -- tensor blobs ----------------------------------------------------------------------------


@dataclass(frozen=True)
class TensorBlob:
    """Tensor descriptors for a message header plus the payload bytes."""

    tensors: list[dict[str, Any]]
    payload: bytes


@dataclass(kw_only=True, frozen=True)
class _WeightFormat:
    """How a weight codec lays out tensor values: item type, compression, and for delta codecs
    whether scales are per channel."""

    # float item, or int8 for quantised deltas
    item: np.dtype
    compressed: bool
    delta: bool = False
    # delta codecs: one scale per slice along dim 0 of tensors with >= 2 dims
    per_channel: bool = False


_WEIGHT_FORMATS = {
    "f32": _WeightFormat(item=np.dtype("<f4"), compressed=False),
    "f16": _WeightFormat(item=np.dtype("<f2"), compressed=False),
    "f32+zstd": _WeightFormat(item=np.dtype("<f4"), compressed=True),
    "f16+zstd": _WeightFormat(item=np.dtype("<f2"), compressed=True),
    "q8delta+zstd": _WeightFormat(item=np.dtype("i1"), compressed=True, delta=True),
    "q8chdelta+zstd": _WeightFormat(
        item=np.dtype("i1"), compressed=True, delta=True, per_channel=True
    ),
}


def _weight_format(codec: str) -> _WeightFormat:
    if codec not in _WEIGHT_FORMATS:
        raise _bad(ErrorCode.UNSUPPORTED_CODEC, f"unknown weight codec {codec!r}")
    return _WEIGHT_FORMATS[codec]


def _scale_count(shape: tuple[int, ...], fmt: _WeightFormat) -> int:
    return shape[0] if fmt.per_channel and len(shape) >= 2 else 1


def _groups(array: np.ndarray, n_scales: int) -> np.ndarray:
    """``array`` as ``(n_scales, size // n_scales)``: one row per scale."""
    return array.reshape(n_scales, array.size // n_scales if n_scales else 0)


def _quantise(delta: np.ndarray, fmt: _WeightFormat) -> tuple[np.ndarray, np.ndarray]:
    """Scales (float32) and int8 values with ``delta ~= value * scale`` per scale group."""
    if not np.isfinite(delta).all():
        raise ValueError("cannot quantise a delta holding NaN or infinity")
    groups = _groups(delta, _scale_count(delta.shape, fmt))
    scales = (np.abs(groups).max(axis=1, initial=0.0) / np.float32(_Q_MAX)).astype(_SCALE)
    divisor = np.where(scales > 0, scales, np.float32(1))[:, None]
    values = np.clip(np.rint(groups / divisor), -_Q_MAX, _Q_MAX).astype(np.int8)
    return scales, values


def encode_tensors(state: Mapping[str, torch.Tensor], codec: str) -> TensorBlob:
    """Encode tensors in the mapping's order (docs/protocol.md, "Tensor blobs").

    Float codecs concatenate the values as little-endian floats; delta codecs take *deltas*
    (new minus held weights) and write every tensor's scales, then every tensor's int8 values.
    ``+zstd`` compresses the whole concatenation into one frame.
    """
    fmt = _weight_format(codec)
    descriptors, scales, values = [], [], []
    for name, tensor in state.items():
        array = tensor.detach().cpu().numpy()
        descriptors.append({"name": name, "shape": list(array.shape)})
        if fmt.delta:
            scale, quantised = _quantise(array.astype(np.float32, copy=False), fmt)
            scales.append(scale.tobytes())
            values.append(quantised.tobytes())
        else:
            values.append(np.ascontiguousarray(array.astype(fmt.item, copy=False)).tobytes())
    raw = b"".join(scales + values)
    return TensorBlob(
        descriptors,
        zstandard.ZstdCompressor(level=ZSTD_LEVEL).compress(raw) if fmt.compressed else raw,
    )


def decode_tensors(
    tensors: list[dict[str, Any]],
    payload: bytes,
    codec: str,
    layout: Layout | None = None,
    *,
    complete: bool = False,
) -> dict[str, torch.Tensor]:
    """Inverse of :func:`encode_tensors`: float32 tensors (dequantised deltas for a delta codec).

    With ``layout`` (the tensors the receiver holds), every descriptor must name one of them with
    its shape (and, ``complete``, all of them) before anything is decompressed, so the blob takes
    no more memory than those tensors; without it, :data:`MAX_DECOMPRESSED_BYTES` bounds it.
    Defects raise :class:`ProtocolError` (BAD_MESSAGE, TOO_LARGE, UNSUPPORTED_CODEC).
    """
    fmt = _weight_format(codec)
    shapes = parse_descriptors(tensors, layout, complete=complete)
    # Python ints: an int64 product can wrap to 0
    counts = [math.prod(shape) for _, shape in shapes]
    scale_counts = [_scale_count(shape, fmt) if fmt.delta else 0 for _, shape in shapes]
    scale_bytes = sum(scale_counts) * _SCALE.itemsize
    total = scale_bytes + sum(counts) * fmt.item.itemsize
    if total > MAX_DECOMPRESSED_BYTES:
        raise _bad(
            ErrorCode.TOO_LARGE, f"tensor blob of {total} bytes exceeds {MAX_DECOMPRESSED_BYTES}"
        )
    if fmt.compressed:
        payload = decompress_at_most(payload, total, "weight payload")
    if len(payload) != total:
        raise _bad(
            ErrorCode.BAD_MESSAGE,
            f"weight payload has {len(payload)} bytes, descriptors say {total}",
        )
    scales = np.frombuffer(payload, dtype=_SCALE, count=sum(scale_counts))
    # (False for NaN)
    if not ((scales >= 0) & (scales <= _MAX_SCALE)).all():
        raise _bad(
            ErrorCode.BAD_MESSAGE,
            "a delta scale is negative, NaN, infinite or so large that values overflow",
        )
    out: dict[str, torch.Tensor] = {}
    offset, first_scale = scale_bytes, 0
    for (name, shape), count, n_scales in zip(shapes, counts, scale_counts, strict=True):
        array = np.frombuffer(payload, dtype=fmt.item, count=count, offset=offset)
        if fmt.delta:
            group_scales = scales[first_scale : first_scale + n_scales]
            values = _groups(array, n_scales).astype(np.float32) * group_scales[:, None]
            first_scale += n_scales
        else:
            values = array.astype(np.float32)
        out[name] = torch.from_numpy(values.reshape(shape))
        offset += count * fmt.item.itemsize
    return out
