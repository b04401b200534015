"""The size an encoded JPEG, PNG or WebP image declares, read from its header without decoding it.

A decoder allocates what the header declares, so a small payload declaring a huge image (a
"decompression bomb") is refused here, before any pixel is decoded. Only the few header bytes
are read: the JPEG start-of-frame segment, the PNG IHDR chunk, the WebP VP8/VP8L/VP8X chunk.
"""

from __future__ import annotations

import struct

from shadowtutor.protocol.errors import ErrorCode, ProtocolError

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
# JPEG start-of-frame markers (baseline, progressive, lossless, arithmetic): 0xC0..0xCF except
# DHT (C4), JPG (C8) and DAC (CC), which are not frames.
_JPEG_SOF = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}
# TEM and RSTn carry no length
_JPEG_STANDALONE = frozenset({0x01, *range(0xD0, 0xD8)})
_JPEG_SOS, _JPEG_EOI = 0xDA, 0xD9


def _bad(codec: str, why: str) -> ProtocolError:
    return ProtocolError(ErrorCode.BAD_FRAME, f"payload is not a valid {codec} image: {why}")


def declared_size(payload: bytes, codec: str) -> tuple[int, int]:
    """``(width, height)`` from the header of a ``jpeg``, ``png`` or ``webp`` payload; BAD_FRAME if
    malformed."""
    parsers = {"jpeg": _jpeg_size, "png": _png_size, "webp": _webp_size}
    if codec not in parsers:
        raise ProtocolError(
            ErrorCode.UNSUPPORTED_CODEC, f"no image header parser for codec {codec!r}"
        )
    width, height = parsers[codec](memoryview(payload))
    if width <= 0 or height <= 0:
        raise _bad(codec, f"declares an empty image ({width}x{height})")
    return width, height


def check_declared_size(payload: bytes, codec: str, width: int, height: int) -> None:
    """Raise BAD_FRAME unless the image declares exactly ``width`` x ``height`` (checked before
    decoding)."""
    declared = declared_size(payload, codec)
    if declared != (width, height):
        raise ProtocolError(
            ErrorCode.BAD_FRAME,
            f"the {codec} image declares {declared[0]}x{declared[1]}, expected {width}x{height}",
        )


def _png_size(data: memoryview) -> tuple[int, int]:
    if len(data) < 24 or bytes(data[:8]) != PNG_SIGNATURE:
        raise _bad("png", "no PNG signature")
    length, chunk = struct.unpack(">I4s", data[8:16])
    if chunk != b"IHDR" or length != 13:
        raise _bad("png", "the first chunk is not a 13-byte IHDR")
    return struct.unpack(">II", data[16:24])


def _jpeg_size(data: memoryview) -> tuple[int, int]:
    if len(data) < 4 or bytes(data[:2]) != b"\xff\xd8":
        raise _bad("jpeg", "no start-of-image marker")
    pos = 2
    while pos + 1 < len(data):
        if data[pos] != 0xFF:
            raise _bad("jpeg", f"expected a marker at byte {pos}")
        marker = data[pos + 1]
        # fill byte before a marker
        if marker == 0xFF:
            pos += 1
            continue
        pos += 2
        if marker in _JPEG_STANDALONE:
            continue
        if marker in (_JPEG_SOS, _JPEG_EOI):
            break
        if pos + 2 > len(data):
            break
        (length,) = struct.unpack(">H", data[pos : pos + 2])
        if length < 2:
            raise _bad("jpeg", f"segment length {length} at byte {pos}")
        if marker in _JPEG_SOF:
            if length < 7 or pos + 7 > len(data):
                raise _bad("jpeg", "truncated start-of-frame segment")
            height, width = struct.unpack(">HH", data[pos + 3 : pos + 7])
            return width, height
        pos += length
    raise _bad("jpeg", "no start-of-frame segment before the image data")


def _webp_size(data: memoryview) -> tuple[int, int]:
    if len(data) < 30 or bytes(data[:4]) != b"RIFF" or bytes(data[8:12]) != b"WEBP":
        raise _bad("webp", "no RIFF/WEBP header")
    chunk = bytes(data[12:16])
    body = data[20:]
    # lossy: frame tag (3), start code 9d 01 2a, 14-bit width and height
    if chunk == b"VP8 ":
        if bytes(body[3:6]) != b"\x9d\x01\x2a":
            raise _bad("webp", "no VP8 start code")
        width, height = struct.unpack("<HH", body[6:10])
        return width & 0x3FFF, height & 0x3FFF
    # lossless: signature 0x2f, then 14 bits width-1 and 14 bits height-1
    if chunk == b"VP8L":
        if body[0] != 0x2F:
            raise _bad("webp", "no VP8L signature")
        (bits,) = struct.unpack("<I", body[1:5])
        return (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
    # extended: flags (4), 24-bit canvas width-1 and height-1
    if chunk == b"VP8X":
        width = int.from_bytes(body[4:7], "little") + 1
        height = int.from_bytes(body[7:10], "little") + 1
        return width, height
    raise _bad("webp", f"unknown first chunk {chunk!r}")
