"""A session's trainable weights and Adam state in flat tensors, tied to its student and optimiser both ways."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from shadowtutor.algorithms.flat_trainable import FlatTrainable


def _model() -> tuple[nn.Module, torch.optim.Adam, FlatTrainable]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.Conv2d(4, 2, 1))
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    return model, optimizer, FlatTrainable(list(model.parameters()), optimizer)


def _step(model: nn.Module, optimizer: torch.optim.Adam, seed: int) -> None:
    torch.manual_seed(seed)
    optimizer.zero_grad()
    model(torch.randn(2, 3, 6, 6)).square().mean().backward()
    optimizer.step()


def _cat(tensors: list[torch.Tensor]) -> torch.Tensor:
    return torch.cat([t.detach().reshape(-1) for t in tensors])


def test_the_parameters_are_views_of_the_flat_weights_both_ways() -> None:
    model, optimizer, flat = _model()
    values = _cat(list(model.parameters()))
    assert torch.equal(flat.weights, values) and flat.weights.numel() == 4 * 3 * 9 + 4 + 2 * 4 + 2
    _step(model, optimizer, 1)  # the optimiser changes the parameters in place: the flat weights follow
    assert not torch.equal(flat.weights, values) and torch.equal(flat.weights, _cat(list(model.parameters())))
    flat.weights.fill_(0.5)  # and writing the flat weights changes the parameters
    assert all(bool((p == 0.5).all()) for p in model.parameters())
    assert flat.weights_now() is flat.weights


def test_a_fresh_optimiser_has_no_moments_and_a_stepped_one_is_tied_to_them() -> None:
    model, optimizer, flat = _model()
    assert flat.moments_now() is None
    _step(model, optimizer, 1)
    _step(model, optimizer, 2)
    state = [optimizer.state[p] for p in model.parameters()]
    found = flat.moments_now()
    assert found is not None
    moments, count = found
    assert count == 2.0 and moments is flat.moments
    assert torch.equal(moments[0], _cat([s["exp_avg"] for s in state]))
    assert torch.equal(moments[1], _cat([s["exp_avg_sq"] for s in state]))
    flat.moments.zero_()  # now tied: the optimiser's state tensors are views of the flat moments
    assert all(bool((s["exp_avg"] == 0).all()) for s in (optimizer.state[p] for p in model.parameters()))


def test_state_loaded_into_the_optimiser_is_tied_again_with_its_values() -> None:
    model, optimizer, flat = _model()
    _step(model, optimizer, 1)
    saved = copy.deepcopy(optimizer.state_dict())
    _step(model, optimizer, 2)
    flat.moments_now()
    optimizer.load_state_dict(saved)  # replaces the state tensors: the tie is gone
    found = flat.moments_now()
    assert found is not None and found[1] == 1.0
    assert torch.equal(found[0][0], _cat([s["exp_avg"] for s in saved["state"].values()]))
    flat.moments.fill_(3.0)
    assert all(bool((optimizer.state[p]["exp_avg_sq"] == 3.0).all()) for p in model.parameters())


def test_replaced_parameter_data_is_tied_again_and_a_moved_parameter_is_refused() -> None:
    model, _, flat = _model()
    first = next(model.parameters())
    first.data = torch.full_like(first, 2.0)  # a new tensor, outside the flat weights
    assert bool((flat.weights_now()[: first.numel()] == 2.0).all())
    flat.weights.zero_()
    assert bool((first == 0).all())
    first.data = first.data.double()
    with pytest.raises(ValueError, match="changed shape, dtype or device"):
        flat.weights_now()


def test_set_steps_keeps_one_count_per_parameter_and_zero_drops_the_state() -> None:
    model, optimizer, flat = _model()
    flat.moments.fill_(0.0)
    flat.set_steps(4)
    parameters = list(model.parameters())
    assert all(float(optimizer.state[p]["step"]) == 4.0 for p in parameters)
    _step(model, optimizer, 1)  # torch's Adam counts each parameter's own step once
    assert all(float(optimizer.state[p]["step"]) == 5.0 for p in parameters)
    found = flat.moments_now()
    assert found is not None and found[1] == 5.0 and not bool((flat.moments == 0).all())
    flat.set_steps(0)
    assert not optimizer.state and flat.moments_now() is None


def test_parameters_of_mixed_dtypes_are_refused() -> None:
    model = nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2).double())
    with pytest.raises(ValueError, match="differ in dtype or device"):
        FlatTrainable(list(model.parameters()), torch.optim.Adam(model.parameters()))
