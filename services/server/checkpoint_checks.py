"""Checks of a session checkpoint's content before any of it is used (``services.server.session_checkpoint``).

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

# of a checkpoint, stored and inflated: the paper's student needs under 2 MiB
MAX_CHECKPOINT_BYTES = 64 << 20


class CheckpointFormatError(ValueError):
    """Bytes that are not a session checkpoint of this format, of the slot asked for, for this student."""


def check_archive(data: bytes, limit: int = MAX_CHECKPOINT_BYTES) -> None:
    """``data`` is a zip archive (``torch.save``'s format) of at most ``limit`` bytes, stored and inflated."""
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
    """``record`` is a dict whose ``types`` keys hold values of those types (``bool`` is not an ``int``)."""
    if not isinstance(record, dict):
        raise CheckpointFormatError(f"not a session checkpoint (a {type(record).__name__}, not a record)")
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
        raise CheckpointFormatError(f"{what}: keys differ from the student's (missing {missing[:3]}, "
                                f"unknown {[str(k)[:40] for k in extra[:3]]})")
    for key, want in expected.items():
        got = given[key]
        if not isinstance(got, torch.Tensor) or got.shape != want.shape or got.dtype != want.dtype:
            shown = f"{tuple(got.shape)} {got.dtype}" if isinstance(got, torch.Tensor) else type(got).__name__
            raise CheckpointFormatError(f"{what}: {key} is {shown}, the student's is {tuple(want.shape)} {want.dtype}")


def check_optimizer(given: Any, template: Mapping[str, Any], params: list[torch.Tensor]) -> None:
    """``given`` is an optimiser state shaped as ``template`` (the fresh optimiser's ``state_dict()``) over
    ``params`` (in its order): the same parameter groups and, per parameter, tensors of its shape."""
    if not isinstance(given, dict) or set(given) != set(template):
        raise CheckpointFormatError("optimizer: not an optimiser state of this student")
    groups, want_groups = given.get("param_groups"), template["param_groups"]
    if not isinstance(groups, list) or len(groups) != len(want_groups) or any(
        not isinstance(g, dict) or set(g) != set(w) or g.get("params") != w["params"]
        for g, w in zip(groups, want_groups, strict=True)
    ):
        raise CheckpointFormatError("optimizer: parameter groups differ from the student's")
    state = given.get("state")
    if not isinstance(state, dict) or any(not isinstance(k, int) or not 0 <= k < len(params) for k in state):
        raise CheckpointFormatError("optimizer: its state names parameters the student lacks")
    for index, entry in state.items():
        if not isinstance(entry, dict):
            raise CheckpointFormatError(f"optimizer: the state of parameter {index} is not a mapping")
        for name, value in entry.items():
            if not isinstance(value, torch.Tensor):
                raise CheckpointFormatError(f"optimizer: {str(name)[:40]} of parameter {index} is not a tensor")
            if value.dim() > 0 and value.shape != params[index].shape:
                raise CheckpointFormatError(f"optimizer: {str(name)[:40]} of parameter {index} is "
                                        f"{tuple(value.shape)}, the parameter {tuple(params[index].shape)}")
