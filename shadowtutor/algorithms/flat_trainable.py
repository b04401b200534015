"""One session's trainable weights and Adam state in flat tensors, so that a batch of sessions
gathers and scatters them as one row per session.

The student's trainable parameters are views of one 1-D tensor (``weights``), and, once the
optimiser has state, Adam's moments of each parameter are views of the two rows of ``moments`` and
its step counts views of ``steps``. Training through the parameters and the optimiser
(``Distiller.train``) therefore changes the flat tensors, and writing the flat tensors changes what
the parameters and the optimiser hold.

Whatever replaces a parameter's data or the optimiser's state tensors
(``Optimizer.load_state_dict``, for one) breaks that tie; :meth:`FlatTrainable.weights_now` and
:meth:`FlatTrainable.moments_now` find out with identity and pointer checks on the host (no device
work) and tie them again, their values copied in.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

MOMENTS = ("exp_avg", "exp_avg_sq")


@dataclass(frozen=True)
class _Moments:
    """Adam's two moments ``both (2, n)``, its rows (``exp_avg``, ``exp_avg_sq``) and, per row, its
    views shaped as the parameters."""

    both: torch.Tensor
    rows: tuple[torch.Tensor, torch.Tensor]
    views: tuple[list[torch.Tensor], list[torch.Tensor]]


class FlatTrainable:
    """The trainable ``parameters`` of one student (in the order the batch's rows lay them out) and
    their state in ``optimizer`` (plain Adam), kept in flat tensors of the parameters' dtype and
    device:

    - ``weights (n,)``, the parameters' values, ``n`` their element count;
    - ``moments (2, n)``, Adam's ``exp_avg`` and ``exp_avg_sq``;
    - ``steps (len(parameters),)``, Adam's step count of each parameter (on the host, in Adam's
      scalar dtype).

    ValueError where the parameters differ in dtype or device.
    """

    def __init__(
        self, parameters: Sequence[nn.Parameter], optimizer: torch.optim.Optimizer
    ) -> None:
        if not parameters:
            raise ValueError("nothing to train: no parameters")
        first = parameters[0]
        if any(p.dtype != first.dtype or p.device != first.device for p in parameters):
            raise ValueError("the trainable parameters differ in dtype or device")
        self.parameters = list(parameters)
        self.optimizer = optimizer
        self.sizes = [p.numel() for p in parameters]
        self.weights = torch.cat([p.detach().reshape(-1) for p in parameters])
        self.steps = torch.zeros(len(parameters), dtype=_step_dtype())
        self._weight_views = self._views(self.weights)
        # made on first use: a distiller trained alone never needs them
        self._moments: _Moments | None = None
        self._step_views = list(self.steps.unbind(0))
        self._pointers = [view.data_ptr() for view in self._weight_views]
        for parameter, view in zip(self.parameters, self._weight_views, strict=True):
            parameter.data = view

    @property
    def moments(self) -> torch.Tensor:
        """Adam's ``exp_avg`` and ``exp_avg_sq`` ``(2, n)`` (zeros when first asked for)."""
        return self._made_moments().both

    @property
    def moment_rows(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``moments``' two rows, ``exp_avg`` and ``exp_avg_sq``."""
        return self._made_moments().rows

    def _made_moments(self) -> _Moments:
        if self._moments is None:
            both = torch.zeros(
                2, self.weights.numel(), dtype=self.weights.dtype, device=self.weights.device
            )
            avg, avg_sq = both.unbind(0)
            self._moments = _Moments(both, (avg, avg_sq), (self._views(avg), self._views(avg_sq)))
        return self._moments

    def _views(self, row: torch.Tensor) -> list[torch.Tensor]:
        """``row (n,)`` cut and shaped as the parameters."""
        parts = torch.split(row, self.sizes)
        return [part.view(p.shape) for part, p in zip(parts, self.parameters, strict=True)]

    def weights_now(self) -> torch.Tensor:
        """``weights``, after tying again any parameter whose data no longer lies in it (its values
        copied in); ValueError for one that changed shape, dtype or device."""
        for parameter, view, pointer in zip(
            self.parameters, self._weight_views, self._pointers, strict=True
        ):
            if parameter.data_ptr() != pointer or parameter.shape != view.shape:
                if (parameter.shape, parameter.dtype, parameter.device) != (
                    view.shape,
                    view.dtype,
                    view.device,
                ):
                    raise ValueError(
                        "a trainable parameter changed shape, dtype or device after its flat copy "
                        "was "
                        f"made: {tuple(parameter.shape)} {parameter.dtype} {parameter.device}"
                    )
                with torch.no_grad():
                    view.copy_(parameter.detach())
                parameter.data = view
        return self.weights

    def moments_now(self) -> tuple[torch.Tensor, float] | None:
        """``moments`` and the step count of the first parameter (the batched update keeps one per
        session), after tying again any state tensor the optimiser replaced (its values copied in; a
        moment it lacks is zero); None where the optimiser has no state yet (a fresh Adam)."""
        state = self.optimizer.state
        if not state:
            return None
        moments = self.moments
        for number, parameter in enumerate(self.parameters):
            entry = state.get(parameter)
            if entry is None or not self._tied(number, entry):
                self._tie(number, parameter, entry or {})
        return moments, float(self._step_views[0])

    def _tied(self, number: int, entry: dict[str, Any]) -> bool:
        avg, avg_sq = self._made_moments().views
        return (
            entry.get("exp_avg") is avg[number]
            and entry.get("exp_avg_sq") is avg_sq[number]
            and entry.get("step") is self._step_views[number]
        )

    def _tied_entry(self, number: int) -> dict[str, torch.Tensor]:
        """Parameter ``number``'s optimiser state as views of the flat tensors."""
        avg, avg_sq = self._made_moments().views
        return {
            "step": self._step_views[number],
            "exp_avg": avg[number],
            "exp_avg_sq": avg_sq[number],
        }

    def _tie(self, number: int, parameter: nn.Parameter, entry: dict[str, Any]) -> None:
        """Copy ``entry``'s values into the flat tensors and make the optimiser's state of
        ``parameter`` their views."""
        tied = self._tied_entry(number)
        with torch.no_grad():
            for name in MOMENTS:
                if name in entry:
                    tied[name].copy_(entry[name])
                else:
                    tied[name].zero_()
            tied["step"].fill_(float(entry["step"]) if "step" in entry else 0.0)
        self.optimizer.state[parameter] = {**entry, **tied}

    def set_steps(self, count: float) -> None:
        """After ``moments`` were written: Adam's step count of every parameter is ``count``; with 0
        the optimiser keeps no state, as a fresh Adam (``moments`` is then ignored until it has
        state again)."""
        state = self.optimizer.state
        if count == 0:
            for parameter in self.parameters:
                state.pop(parameter, None)
            return
        self.steps.fill_(count)
        for number, parameter in enumerate(self.parameters):
            entry = state.get(parameter)
            if entry is None or not self._tied(number, entry):
                state[parameter] = self._tied_entry(number)


def _step_dtype() -> torch.dtype:
    """The dtype torch's Adam keeps its step counts in (float32 unless the default dtype is
    float64)."""
    return torch.float64 if torch.get_default_dtype() == torch.float64 else torch.float32
