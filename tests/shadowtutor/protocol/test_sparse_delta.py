from __future__ import annotations

import struct

import numpy as np
import pytest
import torch
import zstandard

from shadowtutor.protocol.codecs import SPARSE_WEIGHT_CODECS, choose_weight_codecs, decode_tensors
from shadowtutor.protocol.errors import ErrorCode, ProtocolError
from shadowtutor.protocol.sparse_delta import CoordinateSet, _unpack, decode_sparse, encode_sparse
from shadowtutor.protocol.weight_sync import HeldWeights, UpdateEncoder


def initial_state() -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    return {"conv.weight": torch.randn(4, 3, 3, 3, generator=generator),
            "conv.bias": torch.randn(4, generator=generator), "head.weight": torch.randn(5, 4, generator=generator)}


def random_set(set_id: int, state: dict[str, torch.Tensor], seed: int, share: float = 0.2) -> CoordinateSet:
    generator = torch.Generator().manual_seed(seed)
    return CoordinateSet.from_masks(
        set_id, {name: torch.rand(value.shape, generator=generator) < share for name, value in state.items()})


def edge_receives(edge: HeldWeights, blob, codec: str) -> dict[str, torch.Tensor]:
    return edge.apply_sparse(decode_sparse(blob.tensors, blob.payload, codec, edge.coordinates))


def train_on(state: dict[str, torch.Tensor], coordinates: CoordinateSet, step: int) -> None:
    generator = torch.Generator().manual_seed(1000 + step)
    for name, idx in coordinates.indices.items():
        state[name].view(-1)[idx] += 0.01 * torch.randn(idx.numel(), generator=generator)


@pytest.mark.parametrize("codec", SPARSE_WEIGHT_CODECS)
def test_edge_and_mirror_stay_bit_identical_over_set_changes_resyncs_and_a_restored_mirror(codec: str) -> None:
    server = initial_state()
    encoder, edge = UpdateEncoder("f32", codec), HeldWeights()
    edge.replace(initial_state())
    encoder.full(server)
    keys = list(server)
    sizes = []
    for step in range(60):
        coordinates = random_set(1 + step // 10, server, seed=step // 10)
        train_on(server, coordinates, step)
        if step == 25:
            # a resync: full weights clear the held set on both sides, the next update carries it again
            blob = encoder.full(server)
            edge.replace(decode_tensors(blob.tensors, blob.payload, "f32"))
        if step == 40:
            # a takeover: a new encoder goes on from the old one's mirror
            restored = UpdateEncoder("f32", codec)
            restored.restore_mirror(encoder.mirror(keys))
            encoder = restored
        blob = encoder.partial(server, keys, coordinates)
        sizes.append((bool(blob.tensors), len(blob.payload)))
        edge_receives(edge, blob, codec)
        assert edge.coordinates is not None and edge.coordinates.set_id == coordinates.set_id
        for name in keys:
            assert torch.equal(edge.state[name], encoder.held.state[name]), (step, name)
    # the set travels only when it changes (6 sets) or after the resync, never in between
    assert sum(carried for carried, _ in sizes) == 7
    # and the quantisation error stays within half a step of the last change (error feedback)
    assert max((server[n] - edge.state[n]).abs().max().item() for n in keys) < 0.01


def test_int4_values_pack_two_per_byte_and_nothing_changed_is_an_empty_update() -> None:
    server = initial_state()
    coordinates = random_set(1, server, seed=3, share=0.5)
    encoder, edge = UpdateEncoder("f32", "q4sparse+zstd"), HeldWeights()
    edge.replace(initial_state())
    encoder.full(server)
    train_on(server, coordinates, 0)
    edge_receives(edge, encoder.partial(server, list(server), coordinates), "q4sparse+zstd")
    train_on(server, coordinates, 1)
    blob = encoder.partial(server, list(server), coordinates)
    raw = zstandard.ZstdDecompressor().decompress(blob.payload)
    assert blob.tensors == [] and len(raw) == 5 + 4 * 3 + (coordinates.size + 1) // 2
    edge_receives(edge, blob, "q4sparse+zstd")
    empty = encoder.partial(server, list(server), coordinates)
    assert (empty.tensors, empty.payload) == ([], b"") and edge_receives(edge, empty, "q4sparse+zstd") == {}


def raw_update(flags: int, set_id: int, body: bytes) -> bytes:
    return zstandard.ZstdCompressor().compress(struct.pack("<BI", flags, set_id) + body)


def held_edge(codec: str) -> tuple[HeldWeights, CoordinateSet]:
    state = initial_state()
    coordinates = random_set(7, state, seed=5)
    edge = HeldWeights()
    edge.replace(state)
    descriptors, payload = encode_sparse(None, coordinates, codec, with_set=True)
    edge.apply_sparse(decode_sparse(descriptors, payload, codec, None))
    return edge, coordinates


@pytest.mark.parametrize("codec", SPARSE_WEIGHT_CODECS)
def test_malformed_sparse_updates_are_refused_and_change_nothing(codec: str) -> None:
    edge, coordinates = held_edge(codec)
    before = {name: value.clone() for name, value in edge.state.items()}
    descriptors = [{"name": n, "shape": list(s)} for n, s in coordinates.shapes.items()]
    good = encode_sparse(torch.zeros(coordinates.size), coordinates, codec, with_set=False)[1]
    raw = zstandard.ZstdDecompressor().decompress(good)
    bitmap_lengths = [(int(np.prod(s)) + 7) // 8 for s in coordinates.shapes.values()]
    cases = {
        "another set id": raw_update(0, 8, raw[5:]),
        "cut short": zstandard.ZstdCompressor().compress(raw[:-1]),
        "one byte too many": zstandard.ZstdCompressor().compress(raw + b"\0"),
        "unknown flag": raw_update(2, 7, raw[5:]),
        "not zstd": b"\x00garbage",
        "NaN scale": raw_update(0, 7, np.full(3, np.nan, "<f4").tobytes() + raw[5 + 12:]),
        "bitmap past its tensor": raw_update(1, 9, b"\xff" * sum(bitmap_lengths) + raw[5:]),
    }
    for name, payload in cases.items():
        tensors = descriptors if name == "bitmap past its tensor" else []
        with pytest.raises(ProtocolError) as error:
            edge.apply_sparse(decode_sparse(tensors, payload, codec, edge.coordinates))
        assert error.value.code in (ErrorCode.BAD_MESSAGE, ErrorCode.TOO_LARGE), name
    with pytest.raises(ProtocolError, match="names tensors exactly"):
        decode_sparse(descriptors, good, codec, edge.coordinates)
    unknown = CoordinateSet.from_masks(9, {"other": torch.ones(3, dtype=torch.bool)})
    with pytest.raises(ProtocolError, match="does not hold"):
        edge.apply_sparse(decode_sparse(*encode_sparse(None, unknown, codec, with_set=True), codec, None))
    assert edge.coordinates is not None and edge.coordinates.set_id == 7
    assert all(torch.equal(before[name], edge.state[name]) for name in before)


def test_an_odd_int4_block_with_a_set_padding_nibble_is_refused() -> None:
    edge, coordinates = held_edge("q4sparse+zstd")
    raw = zstandard.ZstdDecompressor().decompress(
        encode_sparse(torch.zeros(coordinates.size), coordinates, "q4sparse+zstd", with_set=False)[1])
    if coordinates.size % 2 == 0:
        pytest.skip("this seed's set has an even size")
    padded = raw[:-1] + bytes([raw[-1] | 0x10])
    with pytest.raises(ProtocolError, match="padding nibble"):
        decode_sparse([], zstandard.ZstdCompressor().compress(padded), "q4sparse+zstd", edge.coordinates)


def test_old_edges_offering_only_dense_codecs_are_still_served() -> None:
    from shadowtutor.protocol.codecs import WEIGHT_CODECS

    assert choose_weight_codecs(["q8delta+zstd", "f16+zstd"], WEIGHT_CODECS) == ("f16+zstd", "q8delta+zstd")
    assert choose_weight_codecs(["q4sparse+zstd", "q8delta+zstd", "f16+zstd"], WEIGHT_CODECS) == (
        "f16+zstd", "q4sparse+zstd")
    dense_only = tuple(c for c in WEIGHT_CODECS if c not in SPARSE_WEIGHT_CODECS)
    assert choose_weight_codecs(["q4sparse+zstd", "q8delta+zstd", "f16+zstd"], dense_only) == (
        "f16+zstd", "q8delta+zstd")


def test_int4_values_unpack_low_nibble_first_as_signed_for_every_byte() -> None:
    data = bytes(range(256))
    low, high = np.arange(256) & 0x0F, np.arange(256) >> 4
    want = np.stack([low, high], axis=1).reshape(-1)
    want = np.where(want > 7, want - 16, want)
    assert _unpack(data, 512, 4).tolist() == want.tolist()
    assert _unpack(bytes([0x0F]), 1, 4).tolist() == [-1]  # odd count: the high nibble pads
