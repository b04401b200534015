"""The batched distillation engine's choices by name, torch-free (settings and flags import
them)."""

from __future__ import annotations

from typing import Literal, get_args

Convolution = Literal["grouped", "matmul"]
"""How the sessions' own convolutions of one batch run: one grouped convolution per layer, or im2col
and one batched matrix product per layer (:mod:`shadowtutor.algorithms.stacked_conv`)."""

CONVOLUTIONS: tuple[Convolution, ...] = get_args(Convolution)

Objective = Literal["eager", "compiled"]
"""How a batch's loss and metric run on the scores of its sessions: one PyTorch operation at a time,
or compiled by ``torch.compile`` into a few fused kernels
(:mod:`shadowtutor.algorithms.batched_objective`)."""

OBJECTIVES: tuple[Objective, ...] = get_args(Objective)
