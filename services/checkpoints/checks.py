"""Checks of a session checkpoint's content before any of it is used
(``services.checkpoints.session``).

Each check raises :class:`CheckpointFormatError` with one line saying what is wrong; none raises
anything else for any input. :func:`check_archive` bounds what ``torch.load`` may inflate;
:func:`check_tensors` holds tensors to the student's keys, shapes and dtypes;
:func:`check_optimizer` holds an Adam state to the parameters it belongs to.
"""

from __future__ import annotations

import io
import zipfile
from collections.abc import Mapping
from typing import Any

import torch

from shadowtutor.algorithms.sparse_options import SPARSE_CHOICES

# of a checkpoint, stored and inflated: the paper's student needs under 2 MiB
MAX_CHECKPOINT_BYTES = 64 << 20


class CheckpointFormatError(ValueError):
    """Bytes that are not a session checkpoint of this format, of the slot asked for, for this
    student."""


def check_archive(data: bytes, limit: int = MAX_CHECKPOINT_BYTES) -> None:
    """``data`` is a zip archive (``torch.save``'s format) of at most ``limit`` bytes, stored and
    inflated."""
    if len(data) > limit:
        raise CheckpointFormatError(f"{len(data)} bytes (at most {limit})")
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            inflated = sum(info.file_size for info in archive.infolist())
    except (zipfile.BadZipFile, ValueError, OSError, EOFError) as exc:
        raise CheckpointFormatError(f"not a session checkpoint ({exc})") from None
    if inflated > limit:
        raise CheckpointFormatError(f"it inflates to {inflated} bytes (at most {limit})")


def check_fields(record: Any, types: Mapping[str, tuple[type, ...]]) -> None:
    """``record`` is a dict whose ``types`` keys hold values of those types (``bool`` is not an
    ``int``)."""
    if not isinstance(record, dict):
        raise CheckpointFormatError(
            f"not a session checkpoint (a {type(record).__name__}, not a record)"
        )
    for key, allowed in types.items():
        value = record.get(key)
        if not isinstance(value, allowed) or (isinstance(value, bool) and bool not in allowed):
            names = " or ".join("None" if t is type(None) else t.__name__ for t in allowed)
            raise CheckpointFormatError(f"{key!r} is {type(value).__name__}, not {names}")


def check_tensors(what: str, given: Any, expected: Mapping[str, torch.Tensor]) -> None:
    """``given`` maps exactly ``expected``'s keys to tensors of their shapes and dtypes."""
    if not isinstance(given, dict):
        raise CheckpointFormatError(f"{what}: not a mapping of tensors")
    missing, extra = sorted(set(expected) - set(given)), sorted(set(given) - set(expected))
    if missing or extra:
        raise CheckpointFormatError(
            f"{what}: keys differ from the student's (missing {missing[:3]}, unknown "
            f"{[str(k)[:40] for k in extra[:3]]})"
        )
    for key, want in expected.items():
        got = given[key]
        if not isinstance(got, torch.Tensor) or got.shape != want.shape or got.dtype != want.dtype:
            shown = (
                f"{tuple(got.shape)} {got.dtype}"
                if isinstance(got, torch.Tensor)
                else type(got).__name__
            )
            raise CheckpointFormatError(
                f"{what}: {key} is {shown}, the student's is {tuple(want.shape)} {want.dtype}"
            )


def check_optimizer(given: Any, template: Mapping[str, Any], params: list[torch.Tensor]) -> None:
    """``given`` is an optimiser state shaped as ``template`` (the fresh optimiser's
    ``state_dict()``) over ``params`` (in its order): the same parameter groups and, per parameter,
    tensors of its shape."""
    if not isinstance(given, dict) or set(given) != set(template):
        raise CheckpointFormatError("optimizer: not an optimiser state of this student")
    groups, want_groups = given.get("param_groups"), template["param_groups"]
    if (
        not isinstance(groups, list)
        or len(groups) != len(want_groups)
        or any(
            not isinstance(g, dict) or set(g) != set(w) or g.get("params") != w["params"]
            for g, w in zip(groups, want_groups, strict=True)
        )
    ):
        raise CheckpointFormatError("optimizer: parameter groups differ from the student's")
    state = given.get("state")
    if not isinstance(state, dict) or any(
        not isinstance(k, int) or not 0 <= k < len(params) for k in state
    ):
        raise CheckpointFormatError("optimizer: its state names parameters the student lacks")
    for index, entry in state.items():
        if not isinstance(entry, dict):
            raise CheckpointFormatError(
                f"optimizer: the state of parameter {index} is not a mapping"
            )
        for name, value in entry.items():
            if not isinstance(value, torch.Tensor):
                raise CheckpointFormatError(
                    f"optimizer: {str(name)[:40]} of parameter {index} is not a tensor"
                )
            if value.dim() > 0 and value.shape != params[index].shape:
                raise CheckpointFormatError(
                    f"optimizer: {str(name)[:40]} of parameter {index} is {tuple(value.shape)}, "
                    f"the parameter {tuple(params[index].shape)}"
                )


def check_coordinates(given: Any, expected: Mapping[str, torch.Tensor]) -> None:
    """``given`` is None or a held coordinate set over ``expected``'s tensors: an id in
    ``0..2**32-1``, each tensor's shape as the student's, and its indices ascending, unique and
    within the tensor."""
    if given is None:
        return
    if not isinstance(given, dict) or set(given) != {"set_id", "shapes", "indices"}:
        raise CheckpointFormatError("mirror coordinates: not a coordinate set")
    if not _is_int(given["set_id"]) or not 0 <= given["set_id"] < 2**32:
        raise CheckpointFormatError(
            "mirror coordinates: the set id is not an integer in 0..2**32-1"
        )
    shapes, indices = given["shapes"], given["indices"]
    if not isinstance(shapes, dict) or not isinstance(indices, dict) or set(shapes) != set(indices):
        raise CheckpointFormatError("mirror coordinates: shapes and indices name different tensors")
    for name, shape in shapes.items():
        if name not in expected or list(shape) != list(expected[name].shape):
            raise CheckpointFormatError(
                f"mirror coordinates: {str(name)[:40]} is not a tensor of the student's"
            )
        chosen = indices[name]
        if not isinstance(chosen, torch.Tensor) or chosen.dtype != torch.int64 or chosen.dim() != 1:
            raise CheckpointFormatError(
                f"mirror coordinates: {name}'s indices are not a 1-d int64 tensor"
            )
        size = expected[name].numel()
        if chosen.numel() and (
            int(chosen[0]) < 0 or int(chosen[-1]) >= size or bool((chosen.diff() <= 0).any())
        ):
            raise CheckpointFormatError(
                f"mirror coordinates: {name}'s indices are not ascending within 0..{size - 1}"
            )


def check_sparse(given: Any, expected: Mapping[str, torch.Tensor]) -> None:
    """``given`` is None or a sparse session's record: its options and its chooser's state over
    ``expected``'s tensors (boolean masks and float32 accumulated gradients of their shapes), or no
    chooser where the choice is "residual" (a record without a choice is "gradient")."""
    if given is None:
        return
    if not isinstance(given, dict) or set(given) - {"choice"} != {"fraction", "every", "chooser"}:
        raise CheckpointFormatError("sparse: not a sparse session's record")
    choice = given.get("choice", "gradient")
    if choice not in SPARSE_CHOICES:
        raise CheckpointFormatError(f"sparse: the choice is one of {', '.join(SPARSE_CHOICES)}")
    if (
        not isinstance(given["fraction"], int | float)
        or isinstance(given["fraction"], bool)
        or not _is_int(given["every"])
    ):
        raise CheckpointFormatError(
            "sparse: the fraction is not a number or the interval not an integer"
        )
    chooser = given["chooser"]
    if chooser is None and choice == "residual":
        return
    if not isinstance(chooser, dict) or set(chooser) != {
        "set_id",
        "trained_on_set",
        "masks",
        "accumulated",
    }:
        raise CheckpointFormatError("sparse: not a coordinate chooser's state")
    if (
        not _is_int(chooser["set_id"])
        or not _is_int(chooser["trained_on_set"])
        or chooser["trained_on_set"] < 0
    ):
        raise CheckpointFormatError("sparse: the chooser's counters are not non-negative integers")
    if chooser["masks"] is not None:
        check_tensors(
            "sparse masks",
            chooser["masks"],
            {key: torch.empty(t.shape, dtype=torch.bool) for key, t in expected.items()},
        )
    check_tensors(
        "sparse accumulated",
        chooser["accumulated"],
        {key: torch.empty(t.shape, dtype=torch.float32) for key, t in expected.items()},
    )


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
