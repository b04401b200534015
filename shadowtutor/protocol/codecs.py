"""Payload codecs: frames, label maps and tensor blobs (docs/protocol.md, "Payloads")."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import cv2
import numpy as np
import torch
import zstandard

from shadowtutor.protocol.errors import ErrorCode, ProtocolError

FRAME_CODECS = ("raw", "jpeg", "webp", "png")
LABEL_CODECS = ("png", "raw")
WEIGHT_CODECS = ("f32", "f16", "f32+zstd", "f16+zstd")
DEFAULT_JPEG_QUALITY = 90
MAX_DECOMPRESSED_BYTES = 256 * 1024 * 1024

_IMAGE_EXT = {"jpeg": ".jpg", "webp": ".webp", "png": ".png"}
_QUALITY_FLAG = {"jpeg": cv2.IMWRITE_JPEG_QUALITY, "webp": cv2.IMWRITE_WEBP_QUALITY}


def _bad(code: ErrorCode, message: str) -> ProtocolError:
    return ProtocolError(code, message)


def choose_codec(offered: list[str], supported: tuple[str, ...], preferred: tuple[str, ...]) -> str:
    """The first of ``preferred`` that both sides support; error when none is common."""
    for codec in preferred:
        if codec in offered and codec in supported:
            return codec
    raise _bad(ErrorCode.UNSUPPORTED_CODEC, f"none of {offered} is supported; this side speaks {list(supported)}")


# -- frames ---------------------------------------------------------------------------------


def encode_frame(frame_bgr: np.ndarray, codec: str, quality: int = DEFAULT_JPEG_QUALITY) -> bytes:
    if frame_bgr.dtype != np.uint8 or frame_bgr.ndim != 3 or frame_bgr.shape[2] != 3:
        raise ValueError(f"frames are uint8 (H, W, 3) BGR, got {frame_bgr.dtype} {frame_bgr.shape}")
    if codec == "raw":
        return np.ascontiguousarray(frame_bgr).tobytes()
    if codec not in _IMAGE_EXT:
        raise _bad(ErrorCode.UNSUPPORTED_CODEC, f"unknown frame codec {codec!r}")
    params = [_QUALITY_FLAG[codec], int(quality)] if codec in _QUALITY_FLAG else []
    ok, buf = cv2.imencode(_IMAGE_EXT[codec], frame_bgr, params)
    if not ok:
        raise RuntimeError(f"OpenCV could not encode a {codec} frame")
    return buf.tobytes()


def decode_frame(payload: bytes, codec: str, width: int, height: int) -> np.ndarray:
    """Decode a frame and check it is ``width`` x ``height``; defects raise BAD_FRAME."""
    if codec == "raw":
        expected = width * height * 3
        if width <= 0 or height <= 0 or len(payload) != expected:
            raise _bad(ErrorCode.BAD_FRAME, f"raw frame of {len(payload)} bytes, expected {expected}")
        return np.frombuffer(payload, dtype=np.uint8).reshape(height, width, 3)
    if codec not in _IMAGE_EXT:
        raise _bad(ErrorCode.UNSUPPORTED_CODEC, f"unknown frame codec {codec!r}")
    image = cv2.imdecode(np.frombuffer(payload, dtype=np.uint8), cv2.IMREAD_COLOR) if payload else None
    if image is None:
        raise _bad(ErrorCode.BAD_FRAME, f"payload is not a decodable {codec} image")
    if image.shape[:2] != (height, width):
        raise _bad(ErrorCode.BAD_FRAME, f"frame is {image.shape[1]}x{image.shape[0]}, expected {width}x{height}")
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
        if len(payload) != width * height:
            raise _bad(ErrorCode.BAD_FRAME, f"raw label map of {len(payload)} bytes, expected {width * height}")
        return np.frombuffer(payload, dtype=np.uint8).reshape(height, width)
    if codec != "png":
        raise _bad(ErrorCode.UNSUPPORTED_CODEC, f"unknown label codec {codec!r}")
    labels = cv2.imdecode(np.frombuffer(payload, dtype=np.uint8), cv2.IMREAD_UNCHANGED) if payload else None
    if labels is None or labels.ndim != 2 or labels.shape != (height, width):
        raise _bad(ErrorCode.BAD_FRAME, f"payload is not a {width}x{height} single-channel PNG label map")
    return labels


# -- tensor blobs ----------------------------------------------------------------------------


@dataclass(frozen=True)
class TensorBlob:
    """Tensor descriptors for a message header plus the payload bytes."""

    tensors: list[dict[str, Any]]
    payload: bytes


def _split_codec(codec: str) -> tuple[np.dtype, bool]:
    if codec not in WEIGHT_CODECS:
        raise _bad(ErrorCode.UNSUPPORTED_CODEC, f"unknown weight codec {codec!r}")
    dtype = np.dtype("<f2") if codec.startswith("f16") else np.dtype("<f4")
    return dtype, codec.endswith("+zstd")


def encode_tensors(state: Mapping[str, torch.Tensor], codec: str) -> TensorBlob:
    """Concatenate tensors (in the mapping's order) as little-endian floats, optionally zstd'd."""
    dtype, compressed = _split_codec(codec)
    descriptors, chunks = [], []
    for name, tensor in state.items():
        array = tensor.detach().cpu().numpy().astype(dtype, copy=False)
        descriptors.append({"name": name, "shape": list(array.shape)})
        chunks.append(np.ascontiguousarray(array).tobytes())
    raw = b"".join(chunks)
    return TensorBlob(descriptors, zstandard.ZstdCompressor(level=3).compress(raw) if compressed else raw)


def decode_tensors(tensors: list[dict[str, Any]], payload: bytes, codec: str) -> dict[str, torch.Tensor]:
    """Inverse of :func:`encode_tensors`; returns float32 tensors. Defects raise BAD_MESSAGE."""
    dtype, compressed = _split_codec(codec)
    shapes: list[tuple[str, tuple[int, ...]]] = []
    total = 0
    for desc in tensors:
        name, shape = desc.get("name"), desc.get("shape")
        if not isinstance(name, str) or not isinstance(shape, list) or not all(
            isinstance(d, int) and not isinstance(d, bool) and 0 <= d < 2**31 for d in shape
        ):
            raise _bad(ErrorCode.BAD_MESSAGE, f"bad tensor descriptor {desc!r}")
        count = int(np.prod(shape, dtype=np.int64))
        total += count * dtype.itemsize
        shapes.append((name, tuple(shape)))
    if total > MAX_DECOMPRESSED_BYTES:
        raise _bad(ErrorCode.TOO_LARGE, f"tensor blob of {total} bytes exceeds {MAX_DECOMPRESSED_BYTES}")
    if compressed:
        try:
            payload = zstandard.ZstdDecompressor().decompress(payload, max_output_size=total)
        except zstandard.ZstdError as exc:
            raise _bad(ErrorCode.BAD_MESSAGE, f"weight payload is not valid zstd: {exc}") from None
    if len(payload) != total:
        raise _bad(ErrorCode.BAD_MESSAGE, f"weight payload has {len(payload)} bytes, descriptors say {total}")
    out: dict[str, torch.Tensor] = {}
    offset = 0
    for name, shape in shapes:
        count = int(np.prod(shape, dtype=np.int64))
        array = np.frombuffer(payload, dtype=dtype, count=count, offset=offset).reshape(shape)
        out[name] = torch.from_numpy(array.astype(np.float32))
        offset += count * dtype.itemsize
    return out
