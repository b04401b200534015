"""Argument types shared by several commands."""

from __future__ import annotations

import argparse
import dataclasses
import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, get_args, get_origin

from pydantic import TypeAdapter, ValidationError
from pydantic.fields import FieldInfo

from shadowtutor.algorithms.params import AUTO_THRESHOLD, AlgorithmParams, threshold_fields
from shadowtutor.algorithms.sparse_options import SPARSE_CHOICES, SparseOptions
from shadowtutor.algorithms.update_policy import UpdatePolicy
from shadowtutor.config.errors import error_text, validation_message
from shadowtutor.config.rates import parse_rate
from shadowtutor.config.settings_flags import default_text, flag, setting_name

if TYPE_CHECKING:
    from shadowtutor_lab.evaluation.simulated_link import LinkCodecs

# AlgorithmParams fields that are no benchmark flag: each of the harness's settings (P-8, F-1...) sets its mode.
BENCH_FIXED_FIELDS = ("mode",)


def threshold_setting(text: str) -> float | str:
    """``--threshold``'s value: a number (the fixed THRESHOLD) or ``auto`` (the per-session policy)."""
    try:
        fields = threshold_fields(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return fields.get("threshold", AUTO_THRESHOLD)


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


def _field_type(name: str, field: FieldInfo) -> Any:
    """An argparse ``type`` converting a flag's text to ``field``'s type (ranges are the model's to check)."""
    if name == "threshold":
        return threshold_setting
    annotation: Any = field.annotation  # every AlgorithmParams field is annotated
    adapter: TypeAdapter[Any] = TypeAdapter(annotation)

    def convert(text: str) -> Any:
        try:
            return adapter.validate_python(text)
        except ValidationError as exc:
            raise argparse.ArgumentTypeError(error_text(exc.errors()[0])) from None

    return convert


def add_server_link_options(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    """Add the server's settings a simulated link takes: ``--sparse-fraction``, ``--sparse-every`` and
    ``--sparse-choice``
    (for a link with a sparse delta codec), ``--update-gating``, ``--update-min-gain``,
    ``--update-max-interval``, ``--update-window`` and ``--downlink-budget`` (when the server sends its
    training); returns their actions by ``dest``."""
    sparse, updates = SparseOptions(), UpdatePolicy()
    return {
        "sparse_fraction": parser.add_argument(
            "--sparse-fraction", type=float, default=sparse.fraction,
            help="with a sparse delta codec on the link: the share of the student's trainable coordinates "
                 f"the server trains and sends, as the server's --sparse-fraction (default {sparse.fraction})"),
        "sparse_every": parser.add_argument(
            "--sparse-every", type=positive_int, default=sparse.every,
            help="with a sparse delta codec on the link: key frames trained on one coordinate set before it "
                 f"is chosen again, as the server's --sparse-every (default {sparse.every})"),
        "sparse_choice": parser.add_argument(
            "--sparse-choice", choices=SPARSE_CHOICES, default=sparse.choice,
            help="with a sparse delta codec on the link: 'gradient' trains and sends a set chosen by the "
                 "accumulated gradient, 'residual' trains every coordinate and sends the share furthest "
                 f"from what the edge holds, as the server's --sparse-choice (default {sparse.choice})"),
        "update_gating": parser.add_argument(
            "--update-gating", action="store_true",
            help="with a delta codec on the link: the server sends an update only when it pays, as the "
                 "server's --update-gating (docs/design/update_gating.md)"),
        "update_min_gain": parser.add_argument(
            "--update-min-gain", type=float, default=updates.min_gain,
            help=f"with --update-gating: the mIoU gain (0..1) that sends an update (default {updates.min_gain})"),
        "update_max_interval": parser.add_argument(
            "--update-max-interval", type=positive_int, default=updates.max_interval,
            help="with --update-gating: key frames after which any gain sends an update "
                 f"(default {updates.max_interval})"),
        "update_window": parser.add_argument(
            "--update-window", type=positive_int, default=updates.window,
            help=f"with --update-gating: recent key frames a gain is measured on (default {updates.window})"),
        "downlink_budget": parser.add_argument(
            "--downlink-budget", type=parse_rate, default=None,
            help="with --update-gating: bits per second of updates per camera, in the scene's time "
                 "(e.g. 100kbps; default: none)"),
    }


def with_server_link_options(link: LinkCodecs, args: argparse.Namespace) -> LinkCodecs:
    """``link`` with the options of :func:`add_server_link_options` (ValueError for values out of
    range)."""
    updates = UpdatePolicy(
        gated=args.update_gating, min_gain=args.update_min_gain, max_interval=args.update_max_interval,
        window=args.update_window, downlink_bps=args.downlink_budget,
    )
    return dataclasses.replace(link, sparse=SparseOptions(args.sparse_fraction, args.sparse_every, args.sparse_choice),
                               updates=updates)


def add_algorithm_options(parser: argparse.ArgumentParser) -> None:
    """Every :class:`AlgorithmParams` field but :data:`BENCH_FIXED_FIELDS` as a flag (``--threshold``,
    ``--min-stride``, ...), generated from the model: its description and default are the help, dest the
    field's name, None unless given. ``--threshold`` also takes ``auto``."""
    group = parser.add_argument_group("algorithm parameters (default: the paper's)")
    for name, field in AlgorithmParams.model_fields.items():
        if name in BENCH_FIXED_FIELDS:
            continue
        choices = get_args(field.annotation) if get_origin(field.annotation) is Literal else None
        group.add_argument(flag(setting_name(name, field)), dest=name, type=_field_type(name, field),
                           choices=choices, metavar=None if choices else name.upper(),
                           help=f"{field.description} [{default_text(field).removeprefix('; ')}]")


def algorithm_params(args: argparse.Namespace) -> AlgorithmParams:
    """The parameters the flags of :func:`add_algorithm_options` give, the model's defaults for the rest
    (ValueError naming the problem when out of range); ``--threshold auto`` gives ``threshold_policy="auto"``
    from the default starting THRESHOLD."""
    given = {name: getattr(args, name) for name in AlgorithmParams.model_fields
             if getattr(args, name, None) is not None and name not in BENCH_FIXED_FIELDS}
    try:
        return AlgorithmParams(**given)
    except ValidationError as exc:
        raise ValueError(validation_message(exc)) from None


def emit_results(results: dict[str, Any], markdown: str, out: Path | None) -> None:
    """Print a benchmark's Markdown report and, with ``out``, write ``out`` (JSON) and its ``.md`` beside it."""
    print(markdown)
    if out:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(results, indent=2, default=list) + "\n")
        out.with_suffix(".md").write_text(markdown)
        print(f"wrote {out} and {out.with_suffix('.md')}")
