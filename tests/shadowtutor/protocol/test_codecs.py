from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from shadowtutor.protocol.codecs import (
    WEIGHT_CODECS,
    choose_codec,
    decode_frame,
    decode_labels,
    decode_tensors,
    encode_frame,
    encode_labels,
    encode_tensors,
)
from shadowtutor.protocol.errors import ErrorCode, ProtocolError


def _frame(h: int = 48, w: int = 64) -> np.ndarray:
    rng = np.random.default_rng(0)
    return rng.integers(0, 255, (h, w, 3), dtype=np.uint8)


@pytest.mark.parametrize("codec", ["raw", "png"])
def test_lossless_frame_codecs_round_trip(codec: str) -> None:
    frame = _frame()
    assert np.array_equal(decode_frame(encode_frame(frame, codec), codec, 64, 48), frame)


def test_jpeg_round_trip_is_close_and_smaller() -> None:
    frame = np.full((48, 64, 3), 120, np.uint8)
    data = encode_frame(frame, "jpeg", quality=90)
    assert len(data) < frame.nbytes
    assert np.abs(decode_frame(data, "jpeg", 64, 48).astype(int) - 120).max() <= 3


def test_frame_of_wrong_size_or_garbage_is_bad_frame() -> None:
    frame = _frame()
    with pytest.raises(ProtocolError) as info:
        decode_frame(encode_frame(frame, "jpeg"), "jpeg", 32, 48)
    assert info.value.code is ErrorCode.BAD_FRAME
    with pytest.raises(ProtocolError):
        decode_frame(b"not an image", "jpeg", 64, 48)
    with pytest.raises(ProtocolError):
        decode_frame(b"\x00" * 10, "raw", 64, 48)
    with pytest.raises(ProtocolError) as info:
        decode_frame(b"", "h264", 64, 48)
    assert info.value.code is ErrorCode.UNSUPPORTED_CODEC


@pytest.mark.parametrize("codec", ["png", "raw"])
def test_labels_round_trip(codec: str) -> None:
    labels = np.random.default_rng(1).integers(0, 9, (30, 40), dtype=np.uint8)
    assert np.array_equal(decode_labels(encode_labels(labels, codec), codec, 40, 30), labels)


@pytest.mark.parametrize("codec", WEIGHT_CODECS)
def test_tensor_blobs_round_trip(codec: str) -> None:
    state = {"a.weight": torch.randn(4, 3, 3, 3), "a.bias": torch.randn(4), "empty": torch.zeros(0)}
    blob = encode_tensors(state, codec)
    out = decode_tensors(blob.tensors, blob.payload, codec)
    assert list(out) == list(state)
    tol = 1e-3 if codec.startswith("f16") else 0.0
    for name, tensor in state.items():
        assert out[name].dtype == torch.float32
        assert torch.allclose(out[name], tensor, atol=tol * 4, rtol=tol)


def test_tensor_blob_defects_are_protocol_errors() -> None:
    blob = encode_tensors({"x": torch.ones(10)}, "f32+zstd")
    with pytest.raises(ProtocolError):
        decode_tensors(blob.tensors, blob.payload[:-3], "f32+zstd")
    with pytest.raises(ProtocolError):
        decode_tensors([{"name": "x", "shape": [11]}], blob.payload, "f32+zstd")
    with pytest.raises(ProtocolError):
        decode_tensors([{"name": "x", "shape": ["a"]}], b"", "f32")
    with pytest.raises(ProtocolError) as info:
        decode_tensors([{"name": "x", "shape": [2**30, 2**30]}], b"", "f32")
    assert info.value.code is ErrorCode.TOO_LARGE


def test_choose_codec_prefers_in_order_and_errors_when_nothing_common() -> None:
    assert choose_codec(["raw", "jpeg"], ("raw", "jpeg"), ("jpeg", "raw")) == "jpeg"
    with pytest.raises(ProtocolError) as info:
        choose_codec(["h264"], ("raw",), ("raw",))
    assert info.value.code is ErrorCode.UNSUPPORTED_CODEC


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(WEIGHT_CODECS), st.binary(max_size=64), st.lists(st.integers(0, 8), max_size=3))
def test_tensor_decoder_on_random_payloads_raises_only_protocol_errors(codec: str, payload: bytes,
                                                                       shape: list[int]) -> None:
    try:
        decode_tensors([{"name": "t", "shape": shape}], payload, codec)
    except ProtocolError:
        pass


@settings(max_examples=100, deadline=None)
@given(st.sampled_from(["raw", "jpeg", "png", "webp"]), st.binary(max_size=256))
def test_frame_decoder_on_random_payloads_raises_only_protocol_errors(codec: str, payload: bytes) -> None:
    try:
        decode_frame(payload, codec, 8, 8)
    except ProtocolError:
        pass
