"""Image sizes read from JPEG/PNG/WebP headers without decoding, and decompression bombs refused."""

from __future__ import annotations

import io

import cv2
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image

from shadowtutor.protocol.errors import ErrorCode, ProtocolError
from shadowtutor.protocol.image_header import check_declared_size, declared_size
from tests.support.images import png_bomb

FRAME = np.random.default_rng(0).integers(0, 255, (37, 53, 3), dtype=np.uint8)


def encoded(ext: str, *params: int) -> bytes:
    ok, buf = cv2.imencode(ext, FRAME, list(params))
    assert ok
    return buf.tobytes()


@pytest.mark.parametrize(
    ("codec", "payload"),
    [
        ("jpeg", encoded(".jpg", cv2.IMWRITE_JPEG_QUALITY, 90)),
        ("jpeg", encoded(".jpg", cv2.IMWRITE_JPEG_PROGRESSIVE, 1)),
        ("png", encoded(".png")),
        ("webp", encoded(".webp", cv2.IMWRITE_WEBP_QUALITY, 90)),  # lossy: VP8
        ("webp", encoded(".webp", cv2.IMWRITE_WEBP_QUALITY, 101)),  # lossless: VP8L
    ],
)
def test_sizes_of_real_encodings(codec: str, payload: bytes) -> None:
    assert declared_size(payload, codec) == (53, 37)
    check_declared_size(payload, codec, 53, 37)


def test_extended_webp_and_jpeg_with_leading_segments() -> None:
    out = io.BytesIO()
    Image.fromarray(FRAME).save(out, "WEBP", exif=b"Exif\x00\x00MM")  # EXIF makes an extended (VP8X) file
    assert out.getvalue()[12:16] == b"VP8X" and declared_size(out.getvalue(), "webp") == (53, 37)
    out = io.BytesIO()
    Image.fromarray(FRAME).save(out, "JPEG", exif=b"Exif\x00\x00MM\x00*\x00\x00\x00\x08\x00\x00", comment=b"hi")
    assert declared_size(out.getvalue(), "jpeg") == (53, 37)  # APP0, APP1 and COM segments skipped


def test_a_small_payload_declaring_a_huge_image_is_refused_unread() -> None:
    bomb = png_bomb(60_000, 60_000)  # 10.8 GB of pixels declared in under 100 bytes
    assert len(bomb) < 200 and declared_size(bomb, "png") == (60_000, 60_000)
    with pytest.raises(ProtocolError) as refused:
        check_declared_size(bomb, "png", 64, 48)
    assert refused.value.code is ErrorCode.BAD_FRAME
    assert refused.value.message == "the png image declares 60000x60000, expected 64x48"


@pytest.mark.parametrize(
    ("codec", "payload", "message"),
    [
        ("png", b"GIF89a" + b"\0" * 30, "no PNG signature"),
        ("png", encoded(".png")[:20], "no PNG signature"),
        ("jpeg", b"\xff\xd8\xff\xda" + b"\0" * 20, "no start-of-frame segment"),
        ("jpeg", encoded(".jpg")[:30], "no start-of-frame segment"),
        ("jpeg", b"\xff\xd8\x00\x00", "expected a marker at byte 2"),
        ("webp", b"RIFF\0\0\0\0WEBPVP8Z" + b"\0" * 20, "unknown first chunk"),
        ("webp", b"RIFF\0\0\0\0WAVE" + b"\0" * 20, "no RIFF/WEBP header"),
        ("png", png_bomb(0, 10), "declares an empty image (0x10)"),
    ],
)
def test_malformed_headers_are_bad_frames(codec: str, payload: bytes, message: str) -> None:
    with pytest.raises(ProtocolError, match=message.replace("(", r"\(").replace(")", r"\)")) as refused:
        declared_size(payload, codec)
    assert refused.value.code is ErrorCode.BAD_FRAME


def test_raw_has_no_header() -> None:
    with pytest.raises(ProtocolError) as refused:
        declared_size(b"\0" * 12, "raw")
    assert refused.value.code is ErrorCode.UNSUPPORTED_CODEC


REAL = {"jpeg": encoded(".jpg"), "png": encoded(".png"), "webp": encoded(".webp")}


@settings(max_examples=300, deadline=None)
@given(codec=st.sampled_from(["jpeg", "png", "webp"]), data=st.binary(max_size=64), cut=st.integers(0, 400))
def test_any_bytes_give_a_size_or_bad_frame(codec: str, data: bytes, cut: int) -> None:
    """Random bytes, and real files cut short or with random bytes spliced in: never another exception."""
    real = REAL[codec]
    for payload in (data, real[:cut], real[:cut] + data + real[cut + len(data):]):
        try:
            width, height = declared_size(payload, codec)
        except ProtocolError as exc:
            assert exc.code is ErrorCode.BAD_FRAME
        else:
            assert width > 0 and height > 0
