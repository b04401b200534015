from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from shadowtutor.protocol.codecs import DELTA_WEIGHT_CODECS, decode_tensors, is_delta_codec
from shadowtutor.protocol.errors import ProtocolError
from shadowtutor.protocol.sparse_delta import decode_sparse
from shadowtutor.protocol.weight_sync import HeldWeights, UpdateEncoder

KEYS = ["back.weight", "back.bias"]


def initial_state() -> dict[str, torch.Tensor]:
    torch.manual_seed(0)
    return {"front.weight": torch.randn(8, 3, 3, 3), "back.weight": torch.randn(6, 8, 1, 1) * 0.1,
            "back.bias": torch.randn(6)}


def edge_receives(edge: HeldWeights, blob, codec: str, full: bool) -> None:
    """What the edge agent does with a blob (decode, then the same held-weights rule)."""
    tensors = decode_tensors(blob.tensors, blob.payload, codec)
    if full:
        edge.replace(tensors)
    else:
        edge.apply(tensors, delta=is_delta_codec(codec))


@pytest.mark.parametrize(("weight_codec", "delta_codec"),
                         [("f32", None), ("f16+zstd", None), ("f16+zstd", "q8delta+zstd"),
                          ("f32+zstd", "q8chdelta+zstd")])
def test_server_mirror_and_edge_hold_bit_identical_weights(weight_codec: str, delta_codec: str | None) -> None:
    server, edge = UpdateEncoder(weight_codec, delta_codec), HeldWeights()
    state = initial_state()  # the server's float weights: it trains on from them, whatever the edge holds
    edge_receives(edge, server.full(state), weight_codec, full=True)
    partial_codec = delta_codec or weight_codec
    generator = torch.Generator().manual_seed(1)
    for step in range(12):  # in place, as an optimiser changes parameters
        if step % 3 == 0:
            state["back.weight"].add_(0.01 * torch.randn(6, 8, 1, 1, generator=generator))
        elif step % 3 == 1:
            state["back.bias"].sub_(0.05)
        blob = server.partial(state, KEYS)  # step % 3 == 2: distillation changed nothing
        edge_receives(edge, blob, partial_codec, full=False)
        assert len(blob.tensors) == (0 if step % 3 == 2 else 1)
        assert list(edge.state) == list(server.held.state)
        assert all(torch.equal(edge.state[k], server.held.state[k]) for k in edge.state), step
    assert torch.equal(edge.state["front.weight"], server.held.state["front.weight"])


def test_an_unchanged_tensor_is_left_out_and_nothing_changed_is_an_empty_update() -> None:
    for weight_codec, delta_codec in (("f32", None), ("f16+zstd", "q8delta+zstd")):
        server = UpdateEncoder(weight_codec, delta_codec)
        state = initial_state()
        server.full(state)
        assert server.partial(state, KEYS).tensors == []
        state["back.bias"] = state["back.bias"] + 1.0
        assert [t["name"] for t in server.partial(state, KEYS).tensors] == ["back.bias"]


@pytest.mark.parametrize("delta_codec", DELTA_WEIGHT_CODECS)
def test_quantisation_error_does_not_accumulate(delta_codec: str) -> None:
    """Each delta is taken against what the edge holds, so the edge stays within one step of the server."""
    server = UpdateEncoder("f32", delta_codec)
    state = initial_state()
    server.full(state)
    for _ in range(200):
        state["back.weight"] = state["back.weight"] + 1e-3
        server.partial(state, KEYS)
    # 200 equal steps: a drift that kept each step's rounding error would be far off by now
    error = (server.held.state["back.weight"] - state["back.weight"]).abs().max()
    assert error <= 1e-3 / 127


def test_a_server_training_from_what_the_edge_holds_sends_no_zero_deltas() -> None:
    server = UpdateEncoder("f16+zstd", "q8delta+zstd")
    server.full(initial_state())
    state = dict(server.held.state)
    state["back.bias"] = state["back.bias"] + 0.3
    assert [t["name"] for t in server.partial(state, KEYS).tensors] == ["back.bias"]
    state = dict(server.held.state)  # reset to the held weights: nothing new to send
    assert server.partial(state, KEYS).tensors == []


def test_an_update_that_does_not_fit_is_refused_and_changes_nothing() -> None:
    held = HeldWeights()
    held.replace({"a": torch.zeros(3)})
    with pytest.raises(ProtocolError, match="does not fit"):
        held.apply({"a": torch.ones(3), "b": torch.ones(2)}, delta=True)
    with pytest.raises(ProtocolError, match="does not fit"):
        held.apply({"a": torch.ones(4)}, delta=False)
    assert torch.equal(held.state["a"], torch.zeros(3)) and list(held.state) == ["a"]
    assert torch.equal(held.apply({"a": torch.ones(3)}, delta=True)["a"], torch.ones(3))


def test_full_weights_need_a_float_codec_and_partials_need_full_weights_first() -> None:
    with pytest.raises(ValueError, match="float codec"):
        UpdateEncoder("q8delta+zstd")
    with pytest.raises(ValueError, match="not a delta codec"):
        UpdateEncoder("f32", "f16")
    with pytest.raises(ValueError, match="before full weights"):
        UpdateEncoder("f32").partial(initial_state(), KEYS)


SHAPES = st.lists(st.integers(0, 3), max_size=3).map(tuple)


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.sampled_from(["a", "b", "c"]), SHAPES, max_size=3), st.booleans(), st.data())
def test_held_weights_take_any_decoded_update_whole_or_not_at_all(update_shapes: dict, delta: bool,
                                                                 data: st.DataObject) -> None:
    """Whatever names and shapes an update carries: it sets every tensor it names, or raises and changes nothing."""
    held = HeldWeights()
    held.replace({"a": torch.zeros(2, 3), "b": torch.ones(3)})
    before = {name: tensor.clone() for name, tensor in held.state.items()}
    update = {name: torch.full(shape, data.draw(st.floats(-4, 4, width=32))) for name, shape in update_shapes.items()}
    try:
        new = held.apply(update, delta=delta)
    except ProtocolError:
        assert held.state.keys() == before.keys()
        assert all(torch.equal(held.state[name], before[name]) for name in before)
        return
    for name, value in update.items():
        expected = before[name] + value if delta else value
        assert torch.equal(new[name], expected) and torch.equal(held.state[name], expected)
    assert all(torch.equal(held.state[name], before[name]) for name in before.keys() - update.keys())


def test_a_residual_set_is_the_share_furthest_from_the_held_weights_and_none_when_nothing_changed() -> None:
    server = UpdateEncoder("f32", "q4sparse+zstd")
    state = initial_state()
    server.full(state)
    assert server.residual_coordinates(state, KEYS, 0.5) is None  # nothing trained since sent
    state["back.bias"] = state["back.bias"] + torch.tensor([0.0, 0.5, 0.0, -0.9, 0.0, 0.1])
    chosen = server.residual_coordinates(state, KEYS, 2 / 54)  # 2 of the 48 + 6 coordinates
    assert chosen is not None and chosen.set_id == 1 and chosen.size == 2
    assert chosen.indices["back.bias"].tolist() == [1, 3] and chosen.indices["back.weight"].numel() == 0
    # never more coordinates than differ from the held ones
    assert server.residual_coordinates(state, KEYS, 1.0).size == 3


def test_residual_updates_keep_the_edge_bit_identical_and_carry_what_they_left_out() -> None:
    """A sparse update of the residual's share per round: edge and mirror stay equal bit for bit, and
    rounds of almost no training bring the edge to the server's weights (the left-out share is not lost)."""
    server, edge = UpdateEncoder("f32", "q4sparse+zstd"), HeldWeights()
    state = initial_state()
    welcome = server.full(state)
    edge.replace(decode_tensors(welcome.tensors, welcome.payload, "f32"))
    generator = torch.Generator().manual_seed(3)
    for step in range(40):
        if step < 10:  # training moves every coordinate
            state["back.weight"].add_(0.01 * torch.randn(6, 8, 1, 1, generator=generator))
            state["back.bias"].add_(0.02 * torch.randn(6, generator=generator))
        else:  # training all but stops: the residual left out earlier travels
            state["back.bias"][0] += 1e-6
        chosen = server.residual_coordinates(state, KEYS, 0.1)
        blob = server.partial(state, KEYS, chosen)
        if blob.payload:
            edge.apply_sparse(decode_sparse(blob.tensors, blob.payload, "q4sparse+zstd", edge.coordinates))
        assert all(torch.equal(edge.state[k], server.held.state[k]) for k in edge.state), step
    left = max(float((server.held.state[k] - state[k]).abs().max()) for k in KEYS)
    moved = max(float((state[k] - initial_state()[k]).abs().max()) for k in KEYS)
    assert left < moved / 50
