"""Per-layer change thresholds tau_l (CBinfer, section 3.3): names, the JSON file, validation.

A threshold belongs to the input of one layer of the student: a position of that input counts
as changed when any of its channels moved by more than tau_l since the value the layer last
computed with. ``in_conv1``'s input is the raw BGR frame (units: grey levels 0..255); the others
are feature maps; a block's own name thresholds its normalised (pre-activated) input, and
``<block>.conv2`` / ``.conv3`` the inputs of its 1x3 and 3x1 convolutions, ``tail`` the dec3 block's
output (the input of the fused tail), ``output`` the class scores before the last upsampling. All
zero = labels equal to full-frame inference.

File format (``shadowtutor change-based calibrate`` writes it)::

    {"format": "shadowtutor-change-thresholds", "version": 2,
     "thresholds": {"in_conv1": 6.0, "in_conv2": 0.05, ...}, "source": "..."}

Version 1 files load too: their ``out_conv1`` threshold (on dec3's output upsampled) becomes
``tail``, and their ``out_conv2`` threshold, a point version 2 does not have, is dropped.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from importlib import resources
from pathlib import Path

from shadowtutor.protocol.student_layers import BLOCK_POINTS, BLOCKS, RETIRED_NAMES, THRESHOLD_NAMES

__all__ = ["BLOCKS", "BLOCK_POINTS", "RETIRED_NAMES", "THRESHOLD_NAMES"]

FORMAT = "shadowtutor-change-thresholds"
VERSION = 2
DEFAULT_FILE = "default_thresholds.json"


class ThresholdFileError(ValueError):
    """A change-threshold file that cannot be used, with the reason."""


def zero_thresholds() -> dict[str, float]:
    """Every threshold 0: exact change-based execution (full-frame labels)."""
    return dict.fromkeys(THRESHOLD_NAMES, 0.0)


def validate_thresholds(thresholds: object, origin: str = "thresholds") -> dict[str, float]:
    """``thresholds`` as a complete ``{name: tau >= 0}``, or a :class:`ThresholdFileError` naming
    the problem."""
    if not isinstance(thresholds, Mapping):
        raise ThresholdFileError(
            f"{origin}: 'thresholds' must be an object of layer name -> number"
        )
    unknown = sorted(set(thresholds) - set(THRESHOLD_NAMES))
    missing = [name for name in THRESHOLD_NAMES if name not in thresholds]
    if unknown:
        raise ThresholdFileError(
            f"{origin}: unknown layer names {unknown}; known: {', '.join(THRESHOLD_NAMES)}"
        )
    if missing:
        raise ThresholdFileError(f"{origin}: no threshold for {missing}")
    checked: dict[str, float] = {}
    for name in THRESHOLD_NAMES:
        value = thresholds[name]
        if (
            isinstance(value, bool)
            or not isinstance(value, (int, float))
            or not math.isfinite(value)
            or value < 0
        ):
            raise ThresholdFileError(
                f"{origin}: threshold {name!r} must be a finite number >= 0, got {value!r}"
            )
        checked[name] = float(value)
    return checked


def scaled(thresholds: Mapping[str, float], scale: float) -> dict[str, float]:
    """Every threshold times ``scale`` (> 1: faster, less exact; 0: exact)."""
    if not math.isfinite(scale) or scale < 0:
        raise ValueError(f"the threshold scale must be a finite number >= 0, got {scale}")
    return {name: value * scale for name, value in thresholds.items()}


def parse_threshold_file(text: str, origin: str) -> dict[str, float]:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ThresholdFileError(f"{origin}: not JSON ({exc})") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ThresholdFileError(
            f'{origin}: not a change-threshold file (expected "format": "{FORMAT}")'
        )
    version, thresholds = data.get("version"), data.get("thresholds")
    if version == 1 and isinstance(thresholds, Mapping):
        thresholds = _from_version_1(thresholds)
    elif version != VERSION:
        raise ThresholdFileError(
            f"{origin}: version {version!r} is not supported (this is {VERSION}; 1 is read too)"
        )
    return validate_thresholds(thresholds, origin)


def _from_version_1(thresholds: Mapping[str, object]) -> dict[str, object]:
    """A version 1 file's thresholds in version 2's points (the module's docstring says how)."""
    converted = {name: value for name, value in thresholds.items() if name not in RETIRED_NAMES}
    if "out_conv1" in thresholds:
        converted["tail"] = thresholds["out_conv1"]
    return converted


def load_thresholds(path: str | Path | None = None) -> dict[str, float]:
    """Thresholds from ``path``, or the built-in ones for the packaged student when ``path`` is
    None."""
    if path is None:
        text = resources.files(__package__).joinpath(DEFAULT_FILE).read_text()
        return parse_threshold_file(text, f"built-in {DEFAULT_FILE}")
    try:
        text = Path(path).read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise ThresholdFileError(f"cannot read change-threshold file {path}: {exc}") from None
    return parse_threshold_file(text, str(path))


def threshold_document(thresholds: Mapping[str, float], source: str) -> str:
    """The JSON text of a threshold file."""
    checked = validate_thresholds(thresholds)
    return (
        json.dumps(
            {"format": FORMAT, "version": VERSION, "thresholds": checked, "source": source},
            indent=2,
        )
        + "\n"
    )
