"""Blobs are checked against the receiver's tensors before anything is decompressed, and
decompress to no more than those tensors need."""

from __future__ import annotations

import tracemalloc
from collections.abc import Callable
from typing import Any

import pytest
import torch
import zstandard

from shadowtutor.protocol.codecs import decode_tensors, encode_tensors
from shadowtutor.protocol.errors import ErrorCode, ProtocolError
from shadowtutor.protocol.sparse_delta import CoordinateSet, decode_sparse, encode_sparse
from shadowtutor.protocol.tensor_layout import decompress_at_most, parse_descriptors
from shadowtutor.protocol.weight_sync import HeldWeights
from tests.support.update_bombs import dense_bomb, sparse_bomb

HELD = {"a.weight": (8, 4, 3, 3), "a.bias": (8,)}
MIB = 1024 * 1024


def peak_bytes(call: Callable[[], Any]) -> tuple[int, BaseException | None]:
    """The most memory Python and NumPy held at once during ``call`` (tracemalloc), and what it raised."""
    tracemalloc.start()
    try:
        call()
        raised = None
    except Exception as exc:  # noqa: BLE001 - returned to the test
        raised = exc
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    return peak, raised


def held_weights() -> HeldWeights:
    held = HeldWeights()
    held.replace({name: torch.zeros(shape) for name, shape in HELD.items()})
    return held


@pytest.mark.parametrize(("codec", "bomb"), [("q4sparse+zstd", sparse_bomb), ("q8delta+zstd", dense_bomb)])
def test_an_8_kb_bomb_naming_an_unheld_tensor_is_refused_unread(codec: str, bomb: Callable[[], Any]) -> None:
    descriptors, payload = bomb()
    assert len(payload) < 10_000
    held = held_weights()
    peak, raised = peak_bytes(lambda: held.apply_blob(descriptors, payload, codec))
    assert isinstance(raised, ProtocolError) and raised.code is ErrorCode.BAD_MESSAGE
    assert "evil.weight" in raised.message and "not a held tensor" in raised.message
    assert peak < 1 * MIB
    assert all(torch.equal(value, torch.zeros(HELD[name])) for name, value in held.state.items())


def test_a_held_tensor_whose_payload_inflates_past_it_is_cut_at_its_size() -> None:
    # 64 MiB of zeros, in a frame with a window small enough to pass, naming a held 8-value tensor
    inflating = zstandard.ZstdCompressor(
        compression_params=zstandard.ZstdCompressionParameters(window_log=10)
    ).compress(bytes(64 * MIB))
    held = held_weights()
    peak, raised = peak_bytes(
        lambda: held.apply_blob([{"name": "a.bias", "shape": [8]}], inflating, "q8delta+zstd")
    )
    assert isinstance(raised, ProtocolError) and "descriptors say 12" in raised.message
    assert peak < 1 * MIB


def test_a_sparse_update_for_the_held_set_decompresses_to_its_size_at_most() -> None:
    mask = torch.zeros(8, dtype=torch.bool)
    mask[:3] = True
    coordinates = CoordinateSet.from_masks(3, {"a.bias": mask})
    held = held_weights()
    held.apply_blob(*encode_sparse(torch.ones(3), coordinates, "q8sparse+zstd", True), "q8sparse+zstd")
    inflating = zstandard.ZstdCompressor(
        compression_params=zstandard.ZstdCompressionParameters(window_log=10)
    ).compress(b"\x00\x03\x00\x00\x00" + bytes(64 * MIB))
    peak, raised = peak_bytes(lambda: decode_sparse([], inflating, "q8sparse+zstd", held.coordinates, held.layout))
    assert isinstance(raised, ProtocolError) and "needs at most" in raised.message
    assert peak < 1 * MIB


def test_a_frame_asking_for_a_window_past_the_bound_is_refused() -> None:
    # streamed, so that the frame keeps the window it was given
    stream = zstandard.ZstdCompressor(
        compression_params=zstandard.ZstdCompressionParameters(window_log=24)
    ).compressobj()
    wide = stream.compress(bytes(1000)) + stream.flush()
    with pytest.raises(ProtocolError, match="not zstd within 4096 bytes"):
        decompress_at_most(wide, 4096, "blob")
    assert decompress_at_most(wide, 1 << 24, "blob") == bytes(1000)


def test_a_blob_with_the_wrong_shape_or_an_incomplete_full_set_is_refused() -> None:
    blob = encode_tensors({"a.bias": torch.ones(4)}, "f32+zstd")
    with pytest.raises(ProtocolError, match="not a held tensor of that shape"):
        decode_tensors(blob.tensors, blob.payload, "f32+zstd", HELD)
    blob = encode_tensors({"a.bias": torch.ones(8)}, "f32+zstd")
    assert decode_tensors(blob.tensors, blob.payload, "f32+zstd", HELD)["a.bias"].shape == (8,)
    with pytest.raises(ProtocolError, match=r"full weights without \['a.weight'\]"):
        decode_tensors(blob.tensors, blob.payload, "f32+zstd", HELD, complete=True)
    with pytest.raises(ProtocolError, match="twice"):
        parse_descriptors([{"name": "a.bias", "shape": [8]}] * 2, HELD)


def test_updates_the_held_weights_can_take_still_apply() -> None:
    mask = torch.zeros(8, 4, 3, 3, dtype=torch.bool)
    mask[0, 0] = True
    coordinates = CoordinateSet.from_masks(9, {"a.weight": mask})
    held = held_weights()
    changed = held.apply_blob(*encode_sparse(torch.ones(9), coordinates, "q4sparse+zstd", True), "q4sparse+zstd")
    assert float(changed["a.weight"].sum()) == 9.0
    blob = encode_tensors({"a.bias": torch.full((8,), 0.5)}, "q8chdelta+zstd")
    applied = held.apply_blob(blob.tensors, blob.payload, "q8chdelta+zstd")
    assert torch.allclose(applied["a.bias"], torch.full((8,), 0.5))
