"""The coordinates a distiller trains when updates are sparse (docs/design/sparse_updates.md).

A :class:`CoordinateChooser` picks the ``fraction`` of a student's trainable coordinates with the
largest gradient magnitude accumulated since its last choice (the current step's gradient included),
and chooses again once ``every`` key frames have been trained on that set. Between choices only the
chosen coordinates move: before each optimiser step, :meth:`CoordinateChooser.before_step` zeroes
the gradient and Adam's two moments of every other coordinate, so that plain Adam leaves them
exactly as they are (a zero moment gives a zero step). A coordinate that leaves the set thus loses
its moments; one that joins it starts from zero moments with the parameter's step count.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import nn

from shadowtutor.algorithms.sparse_options import SparseOptions
from shadowtutor.protocol.sparse_delta import CoordinateSet, is_sparse_codec, largest_masks
from shadowtutor.protocol.weight_sync import UpdateEncoder


class CoordinateChooser:
    """Chooses and enforces one student's trained coordinates over ``parameters`` (by state-dict
    key, in the order the coordinate set lists them)."""

    def __init__(self, options: SparseOptions, parameters: dict[str, nn.Parameter]) -> None:
        self.options = options
        self.parameters = parameters
        self.set_id = 0
        self.masks: dict[str, torch.Tensor] | None = None
        self.trained_on_set = 0
        self._accumulated: dict[str, torch.Tensor] = {}

    @property
    def coordinates(self) -> CoordinateSet | None:
        """The chosen set (None before the first choice)."""
        return None if self.masks is None else CoordinateSet.from_masks(self.set_id, self.masks)

    def before_step(self, optimizer: torch.optim.Optimizer) -> None:
        """After ``backward()``, before ``optimizer.step()``: accumulate the gradient's magnitude,
        choose again when due, then zero the gradient and Adam moments outside the set."""
        for name, parameter in self.parameters.items():
            if parameter.grad is not None:
                magnitude = parameter.grad.detach().abs()
                held = self._accumulated.get(name)
                self._accumulated[name] = magnitude if held is None else held + magnitude
        if self.masks is None or self.trained_on_set >= self.options.every:
            self._choose()
        assert self.masks is not None, "a set was chosen above"
        with torch.no_grad():
            for name, parameter in self.parameters.items():
                mask = self.masks[name].to(parameter.dtype)
                if parameter.grad is not None:
                    parameter.grad.mul_(mask)
                state = optimizer.state.get(parameter, {})
                for moment in ("exp_avg", "exp_avg_sq"):
                    if moment in state:
                        state[moment].mul_(mask)

    def key_frame_trained(self) -> None:
        """Count a key frame whose training took at least one step on the current set."""
        self.trained_on_set += 1

    def _choose(self) -> None:
        scores = {
            name: self._accumulated.get(name, torch.zeros_like(parameter))
            for name, parameter in self.parameters.items()
        }
        total = sum(parameter.numel() for parameter in self.parameters.values())
        self.masks = largest_masks(scores, max(1, round(self.options.fraction * total)))
        self.set_id += 1
        self.trained_on_set = 0
        self._accumulated = {}

    def state(self) -> dict[str, object]:
        """What :meth:`load_state` needs to go on in another process (CPU tensors, ints)."""
        return {
            "set_id": self.set_id,
            "trained_on_set": self.trained_on_set,
            "masks": None
            if self.masks is None
            else {k: m.cpu().clone() for k, m in self.masks.items()},
            "accumulated": {k: a.cpu().clone() for k, a in self._accumulated.items()},
        }

    def load_state(self, state: dict[str, object]) -> None:
        """Go on from :meth:`state`'s record."""
        device = next(iter(self.parameters.values())).device
        masks = state["masks"]
        accumulated = state["accumulated"]
        assert isinstance(masks, dict | type(None)) and isinstance(accumulated, dict)
        self.set_id = int(state["set_id"])  # type: ignore[call-overload]
        self.trained_on_set = int(state["trained_on_set"])  # type: ignore[call-overload]
        self.masks = (
            None if masks is None else {k: m.to(device, torch.bool) for k, m in masks.items()}
        )
        self._accumulated = {k: a.to(device) for k, a in accumulated.items()}


def coordinates_to_send(
    encoder: UpdateEncoder,
    chooser: CoordinateChooser | None,
    options: SparseOptions,
    state: Mapping[str, torch.Tensor],
    keys: list[str],
) -> CoordinateSet | None:
    """The coordinate set a partial update of ``keys`` of ``state`` carries for an edge that
    ``encoder`` mirrors: None without a sparse delta codec; the trained set where ``chooser``
    trains one; else (``options.choice`` "residual") the share of the coordinates furthest from
    what the edge holds (:meth:`UpdateEncoder.residual_coordinates`)."""
    if encoder.delta_codec is None or not is_sparse_codec(encoder.delta_codec):
        return None
    if chooser is not None:
        return chooser.coordinates
    return encoder.residual_coordinates(state, keys, options.fraction)
