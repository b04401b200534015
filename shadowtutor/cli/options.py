"""Argument types shared by several commands."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from shadowtutor.algorithms.params import (
    AUTO_THRESHOLD,
    RESTORES,
    STRIDE_METRICS,
    WEIGHT_MAPS,
    AlgorithmParams,
    threshold_fields,
)


def threshold_setting(text: str) -> float | str:
    """``--threshold``'s value: a number (the fixed THRESHOLD) or ``auto`` (the per-session policy)."""
    try:
        fields = threshold_fields(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return fields.get("threshold", AUTO_THRESHOLD)


# Flags of the algorithm parameters (the paper's section 5.3): flag -> AlgorithmParams field, argparse keywords.
_ALGORITHM_FLAGS: dict[str, tuple[str, dict[str, Any]]] = {
    "--threshold": ("threshold", {"type": threshold_setting, "metavar": "T|auto",
                                  "help": "THRESHOLD in (0, 1), default 0.8 (the paper), or auto: the stride "
                                          "(Algorithm 2) is scaled against a THRESHOLD each session sets from the "
                                          "metrics its key frames reach, Algorithm 1 still trains to 0.8 "
                                          "(docs/design/threshold_auto.md)"}),
    "--min-stride": ("min_stride", {"type": int}),
    "--max-stride": ("max_stride", {"type": int}),
    "--max-updates": ("max_updates", {"type": int}),
    "--learning-rate": ("learning_rate", {"type": float}),
    "--stride-metric": ("stride_metric", {"choices": STRIDE_METRICS, "help": "the metric Algorithm 2 scales the "
                                          "stride by: after distillation (default, the paper) or before it (the "
                                          "score of the student the edge ran)"}),
    "--restore": ("restore", {"choices": RESTORES, "help": "what Algorithm 1 rolls back to its best student: the "
                              "weights, or the weights with Adam's state (the authors)"}),
    "--weight-map": ("weight_map", {"choices": WEIGHT_MAPS, "help": "boxes the loss weights x5: the teacher's "
                                    "instance boxes (the authors; label regions for a teacher without them) or "
                                    "the label map's regions"}),
}


def frame_size(text: str) -> tuple[int, int]:
    """``WxH`` -> ``(W, H)``, both positive."""
    try:
        width, height = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected WIDTHxHEIGHT such as 640x360, got {text!r}") from None
    if width <= 0 or height <= 0:
        raise argparse.ArgumentTypeError(f"width and height must be positive, got {text!r}")
    return width, height


def student_size(text: str) -> tuple[int, int] | None:
    """``WxH`` or ``native`` -> the student's input scale (:func:`shadowtutor.models.scale.parse_size`)."""
    from shadowtutor.models.scale import parse_size

    try:
        return parse_size(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _int_at_least(text: str, minimum: int, wanted: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {wanted}, got {text!r}") from None
    if value < minimum:
        raise argparse.ArgumentTypeError(f"expected {wanted}, got {value}")
    return value


def positive_int(text: str) -> int:
    return _int_at_least(text, 1, "a positive integer")


def non_negative_int(text: str) -> int:
    return _int_at_least(text, 0, "a whole number >= 0")


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}")
    return value


def invoked_command(args: argparse.Namespace) -> str:
    """The command line that was parsed into ``args``, as ``shadowtutor ...`` (for reports)."""
    import shlex

    return shlex.join(["shadowtutor", *args.argv])


def script_command(script: str | Path, argv: Sequence[str]) -> str:
    """The command line of a study script in ``lab/scripts/`` run with ``argv``, from the repository root (for the
    results file it writes)."""
    import shlex

    return shlex.join(["python", f"lab/scripts/{Path(script).name}", *argv])


def add_algorithm_options(parser: argparse.ArgumentParser) -> None:
    """The algorithm parameters as flags: ``--threshold``, ``--min-stride``, ``--max-stride``,
    ``--max-updates``, ``--learning-rate``, ``--stride-metric``, ``--restore`` and ``--weight-map``."""
    defaults = AlgorithmParams()
    group = parser.add_argument_group("algorithm parameters (default: the paper's)")
    for flag, (name, keywords) in _ALGORITHM_FLAGS.items():
        group.add_argument(flag, dest=name, **{"help": f"default {getattr(defaults, name)}", **keywords})


def algorithm_params(args: argparse.Namespace) -> AlgorithmParams:
    """The parameters the flags of :func:`add_algorithm_options` give (ValueError when out of range);
    ``--threshold auto`` gives ``threshold_policy="auto"`` from the default starting THRESHOLD."""
    given = {name: getattr(args, name) for name, _ in _ALGORITHM_FLAGS.values() if getattr(args, name) is not None}
    threshold = threshold_fields(given.pop("threshold", None))
    return AlgorithmParams(**given, **threshold)


def emit_results(results: dict[str, Any], markdown: str, out: Path | None) -> None:
    """Print a benchmark's Markdown report and, with ``out``, write ``out`` (JSON) and its ``.md`` beside it."""
    print(markdown)
    if out:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(results, indent=2, default=list) + "\n")
        out.with_suffix(".md").write_text(markdown)
        print(f"wrote {out} and {out.with_suffix('.md')}")
