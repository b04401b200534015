"""The batched distillation engine's choices by name, torch-free (settings and flags import them)."""

from __future__ import annotations

from typing import Literal, get_args

Convolution = Literal["grouped", "matmul"]
"""How the sessions' own convolutions of one batch run: one grouped convolution per layer, or im2col and one
batched matrix product per layer (:mod:`shadowtutor.algorithms.conv_matmul`)."""

CONVOLUTIONS: tuple[Convolution, ...] = get_args(Convolution)
