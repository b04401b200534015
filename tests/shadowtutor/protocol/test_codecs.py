from __future__ import annotations

import numpy as np
import pytest
import torch
import zstandard
from hypothesis import example, given, settings
from hypothesis import strategies as st

from shadowtutor.protocol.codecs import (
    DEFAULT_FRAME_QUALITY,
    DELTA_WEIGHT_CODECS,
    FLOAT_WEIGHT_CODECS,
    WEIGHT_CODECS,
    choose_codec,
    choose_weight_codecs,
    decode_frame,
    decode_labels,
    decode_tensors,
    encode_frame,
    encode_labels,
    encode_tensors,
)
from shadowtutor.protocol.errors import ErrorCode, ProtocolError

# the codecs decode_tensors decodes on its own (the sparse ones need a held coordinate set)
TENSOR_CODECS = FLOAT_WEIGHT_CODECS + DELTA_WEIGHT_CODECS


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


@pytest.mark.parametrize("codec", ["jpeg", "webp"])
def test_quality_applies_to_jpeg_and_webp_and_defaults_per_codec(codec: str) -> None:
    frame = _frame(96, 128)
    sizes = [len(encode_frame(frame, codec, quality)) for quality in (30, 60, 95)]
    assert sizes == sorted(sizes) and sizes[0] < sizes[-1]
    assert encode_frame(frame, codec) == encode_frame(frame, codec, DEFAULT_FRAME_QUALITY[codec])


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


@pytest.mark.parametrize("codec", FLOAT_WEIGHT_CODECS)
def test_tensor_blobs_round_trip(codec: str) -> None:
    state = {"a.weight": torch.randn(4, 3, 3, 3), "a.bias": torch.randn(4), "empty": torch.zeros(0)}
    blob = encode_tensors(state, codec)
    out = decode_tensors(blob.tensors, blob.payload, codec)
    assert list(out) == list(state)
    tol = 1e-3 if codec.startswith("f16") else 0.0
    for name, tensor in state.items():
        assert out[name].dtype == torch.float32
        assert torch.allclose(out[name], tensor, atol=tol * 4, rtol=tol)


@pytest.mark.parametrize("codec", DELTA_WEIGHT_CODECS)
def test_delta_codecs_round_trip_within_half_a_quantisation_step(codec: str) -> None:
    torch.manual_seed(0)
    deltas = {"conv.weight": torch.randn(4, 3, 3, 3) * torch.tensor([1.0, 1e-3, 10.0, 0.0]).view(4, 1, 1, 1),
              "conv.bias": torch.randn(4), "zero": torch.zeros(5), "empty": torch.zeros(0, 3)}
    blob = encode_tensors(deltas, codec)
    out = decode_tensors(blob.tensors, blob.payload, codec)
    assert list(out) == list(deltas) and all(t.dtype == torch.float32 for t in out.values())
    per_channel = codec.startswith("q8ch")
    for name, delta in deltas.items():
        if not delta.numel():
            continue
        groups = delta.reshape(delta.shape[0], -1) if per_channel and delta.dim() >= 2 else delta.reshape(1, -1)
        step = groups.abs().amax(dim=1, keepdim=True) / 127
        assert ((out[name].reshape(groups.shape) - groups).abs() <= step / 2 * 1.0001).all(), name
    assert torch.equal(out["zero"], torch.zeros(5))
    # the channel scaled by 1e-3 keeps its detail only with a scale per channel
    small = (out["conv.weight"][1] - deltas["conv.weight"][1]).abs().max()
    assert (small < 1e-5) if per_channel else (small > 1e-4)


def test_delta_byte_layout_is_scales_then_int8_values() -> None:
    deltas = {"w": torch.tensor([[0.5, -1.0], [0.25, 0.0]]), "b": torch.tensor([2.0, -0.5, 0.0])}
    for codec, scales in (("q8delta+zstd", [1 / 127, 2 / 127]), ("q8chdelta+zstd", [1 / 127, 0.25 / 127, 2 / 127])):
        raw = zstandard.ZstdDecompressor().decompress(encode_tensors(deltas, codec).payload)
        n = len(scales)
        assert np.array_equal(np.frombuffer(raw[: 4 * n], "<f4"), np.array(scales, np.float32))
        values = np.frombuffer(raw[4 * n :], np.int8)
        w_values = [64, -127, 32, 0] if n == 2 else [64, -127, 127, 0]
        assert values.tolist() == w_values + [127, -32, 0]


def test_delta_encoder_refuses_non_finite_deltas() -> None:
    with pytest.raises(ValueError, match="NaN or infinity"):
        encode_tensors({"x": torch.tensor([1.0, float("nan")])}, "q8delta+zstd")


@pytest.mark.parametrize("scale", [-1.0, float("nan"), float("inf"), 3e38])
def test_delta_decoder_refuses_bad_scales(scale: float) -> None:
    raw = np.array([scale], "<f4").tobytes() + b"\x01\x02"
    with pytest.raises(ProtocolError, match="scale"):
        decode_tensors([{"name": "x", "shape": [2]}], zstandard.ZstdCompressor().compress(raw), "q8delta+zstd")


def test_a_zstd_header_declaring_a_huge_size_is_refused_without_allocating_it() -> None:
    payload = bytearray(encode_tensors({"x": torch.ones(10)}, "f32+zstd").payload)
    payload[4] ^= 192  # the frame header's content size becomes enormous
    with pytest.raises(ProtocolError) as info:
        decode_tensors([{"name": "x", "shape": [10]}], bytes(payload), "f32+zstd")
    assert info.value.code is ErrorCode.BAD_MESSAGE
    bomb = zstandard.ZstdCompressor().compress(bytes(10_000_000))  # 10 MB of zeros in a few hundred bytes
    # its window is over the 40 bytes the descriptors need
    with pytest.raises(ProtocolError, match="not zstd within 40 bytes"):
        decode_tensors([{"name": "x", "shape": [10]}], bomb, "f32+zstd")
    small_window = zstandard.ZstdCompressor(
        compression_params=zstandard.ZstdCompressionParameters(window_log=10)
    ).compress(bytes(10_000_000))
    with pytest.raises(ProtocolError, match="descriptors say 40"):
        decode_tensors([{"name": "x", "shape": [10]}], small_window, "f32+zstd")


def test_duplicate_tensor_names_are_bad_messages() -> None:
    blob = encode_tensors({"x": torch.ones(2)}, "f32")
    with pytest.raises(ProtocolError, match="twice"):
        decode_tensors(blob.tensors * 2, blob.payload * 2, "f32")


def test_weight_codec_agreement_pairs_a_delta_codec_with_a_float_codec() -> None:
    assert choose_weight_codecs(["q8delta+zstd", "f32", "f16+zstd"], WEIGHT_CODECS) == ("f32", "q8delta+zstd")
    assert choose_weight_codecs(["f16+zstd", "q8delta+zstd"], WEIGHT_CODECS) == ("f16+zstd", None)
    assert choose_weight_codecs(["q8delta+zstd", "f32"], ("f32",)) == ("f32", None)
    with pytest.raises(ProtocolError) as info:
        choose_weight_codecs(["q8delta+zstd"], WEIGHT_CODECS)
    assert info.value.code is ErrorCode.UNSUPPORTED_CODEC and "float codec" in info.value.message
    with pytest.raises(ProtocolError):
        choose_weight_codecs(["q8delta+zstd", "f16"], ("q8delta+zstd", "f32"))


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
@given(st.sampled_from(TENSOR_CODECS), st.binary(max_size=64), st.lists(st.integers(0, 8), max_size=3))
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


def _valid_blob(codec: str) -> tuple[list, bytes]:
    torch.manual_seed(1)
    blob = encode_tensors({"a": torch.randn(3, 2, 2), "b": torch.randn(5)}, codec)
    return blob.tensors, blob.payload


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(TENSOR_CODECS), st.data())
def test_tensor_decoder_on_truncated_or_corrupted_payloads_raises_only_protocol_errors(
    codec: str, data: st.DataObject
) -> None:
    tensors, payload = _valid_blob(codec)
    cut = data.draw(st.integers(0, len(payload)))
    flips = data.draw(st.lists(st.tuples(st.integers(0, max(0, cut - 1)), st.integers(1, 255)), max_size=4))
    damaged = bytearray(payload[:cut])
    for index, mask in flips:
        if index < len(damaged):
            damaged[index] ^= mask
    try:
        out = decode_tensors(tensors, bytes(damaged), codec)
    except ProtocolError:
        return
    assert [(name, list(t.shape)) for name, t in out.items()] == [(d["name"], d["shape"]) for d in tensors]


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(DELTA_WEIGHT_CODECS), st.lists(st.integers(0, 6), max_size=3), st.data())
def test_delta_decoder_on_random_well_framed_content_raises_only_protocol_errors(
    codec: str, shape: list[int], data: st.DataObject
) -> None:
    scales = shape[0] if codec.startswith("q8ch") and len(shape) >= 2 else 1
    size = 4 * scales + int(np.prod(shape, dtype=np.int64))
    raw = data.draw(st.binary(min_size=max(0, size - 2), max_size=size + 2))
    try:
        out = decode_tensors([{"name": "t", "shape": shape}], zstandard.ZstdCompressor().compress(raw), codec)
    except ProtocolError:
        return
    assert len(raw) == size and torch.isfinite(out["t"]).all()


@settings(max_examples=150, deadline=None)
@given(st.sampled_from(["raw", "png", "bmp"]), st.binary(max_size=256), st.integers(-2, 20), st.integers(-2, 20))
@example("raw", b"", 0, -1)  # a negative size made numpy's reshape raise ValueError, not a typed error
@example("raw", b"\0" * 4, -2, -2)
def test_label_decoder_on_random_payloads_raises_only_protocol_errors(codec: str, payload: bytes, width: int,
                                                                      height: int) -> None:
    try:
        labels = decode_labels(payload, codec, width, height)
    except ProtocolError:
        return
    assert labels.shape == (height, width) and labels.dtype == np.uint8


@settings(max_examples=100, deadline=None)
@given(st.data())
def test_label_decoder_on_damaged_png_label_maps(data: st.DataObject) -> None:
    payload = bytearray(encode_labels(np.arange(48, dtype=np.uint8).reshape(6, 8) % 9, "png"))
    for index in data.draw(st.lists(st.integers(0, len(payload) - 1), max_size=4)):
        payload[index] ^= data.draw(st.integers(1, 255))
    cut = data.draw(st.integers(0, len(payload)))
    try:
        labels = decode_labels(bytes(payload[:cut]), "png", 8, 6)
    except ProtocolError:
        return
    assert labels.shape == (6, 8)


DESCRIPTOR_VALUES = st.none() | st.booleans() | st.integers(-5, 2**40) | st.floats() | st.text(max_size=3)
DESCRIPTORS = st.lists(
    st.one_of(
        st.fixed_dictionaries({"name": st.sampled_from(["a", "b"]) | DESCRIPTOR_VALUES,
                               "shape": st.lists(st.sampled_from([0, 1, 2, 3, 16, 2**30, 2**31 - 1])
                                                 | DESCRIPTOR_VALUES, max_size=4) | DESCRIPTOR_VALUES}),
        DESCRIPTOR_VALUES,
        st.lists(DESCRIPTOR_VALUES, max_size=2),
    ),
    max_size=4,
)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(TENSOR_CODECS), DESCRIPTORS, st.binary(max_size=96))
@example("f32", [{"name": "t", "shape": [2**30, 2**30, 16]}], b"")  # 2**64 values: an int64 count wrapped to 0
@example("q8delta+zstd", [{"name": "t", "shape": [2**30] * 4}], b"")
def test_tensor_decoder_on_any_descriptors_raises_only_protocol_errors(codec: str, tensors: list,
                                                                       payload: bytes) -> None:
    """The header's ``tensors`` list is the edge's or server's JSON: any value must give a typed error."""
    try:
        out = decode_tensors(tensors, payload, codec)
    except ProtocolError as exc:
        assert exc.code in (ErrorCode.BAD_MESSAGE, ErrorCode.TOO_LARGE)
        return
    assert [(name, list(t.shape)) for name, t in out.items()] == [(d["name"], d["shape"]) for d in tensors]


@settings(max_examples=200, deadline=None)
@given(st.sampled_from([c for c in FLOAT_WEIGHT_CODECS if c.endswith("+zstd")]),
       st.lists(st.integers(0, 6), max_size=3), st.data())
def test_float_zstd_decoder_on_random_well_framed_content(codec: str, shape: list[int], data: st.DataObject) -> None:
    size = int(np.prod(shape, dtype=np.int64)) * (2 if codec.startswith("f16") else 4)
    raw = data.draw(st.binary(min_size=max(0, size - 3), max_size=size + 3))
    frame = zstandard.ZstdCompressor(write_content_size=data.draw(st.booleans())).compress(raw)
    try:
        out = decode_tensors([{"name": "t", "shape": shape}], frame, codec)
    except ProtocolError:
        assert len(raw) != size
        return
    assert len(raw) == size and list(out["t"].shape) == shape
