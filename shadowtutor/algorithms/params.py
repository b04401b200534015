"""The paper's algorithm parameters (section 5.3), declared once: :class:`AlgorithmParams` (no torch
import).

Each field's default and description are the only ones: the server's flags and ``SHADOWTUTOR_*``
variables (:mod:`shadowtutor.config.settings_flags`) and any other command's flags are generated
from them, help text included. A field's flag and variable are named after the field, or after its
``json_schema_extra["setting"]`` (``mode`` is ``--distill-mode`` / ``SHADOWTUTOR_DISTILL_MODE``).
"""

from __future__ import annotations

import math
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from shadowtutor.config.errors import validation_message

# the same as shadowtutor.models.student.DistillMode
DistillMode = Literal["partial", "full"]
# Which metric Algorithm 2 scales the stride by: "after" distillation (the paper), or "before" it,
# the score the edge's current student got on the key frame (how stale it had become over the last
# stride).
StrideMetric = Literal["after", "before"]
STRIDE_METRICS: tuple[StrideMetric, ...] = ("after", "before")
# What Algorithm 1 restores when it ends on a worse student than its best: the trainable weights
# only, or the weights with Adam's state as it was then (the authors deep-copy the model with its
# optimiser).
Restore = Literal["weights", "weights+adam"]
RESTORES: tuple[Restore, ...] = ("weights", "weights+adam")
# Where the loss's object weight comes from: the teacher's instance boxes (the authors: every Mask
# R-CNN instance above its score threshold, any class), or boxes of the connected non-background
# regions of the label map (any teacher). "instances" falls back to "regions" for a teacher that
# gives no boxes.
WeightMap = Literal["instances", "regions"]
WEIGHT_MAPS: tuple[WeightMap, ...] = ("instances", "regions")
# How a session's THRESHOLD is chosen: "fixed" at ``threshold`` (the paper), or "auto": the session
# starts at ``threshold`` and sets it from what it measures on its own key frames
# (shadowtutor.algorithms.threshold).
ThresholdPolicy = Literal["fixed", "auto"]
THRESHOLD_POLICIES: tuple[ThresholdPolicy, ...] = ("fixed", "auto")
# the THRESHOLD setting (flag, variable) that selects the "auto" policy
AUTO_THRESHOLD = "auto"
# How Algorithm 2's strides are bounded: "clock": in seconds of the source (min_key_interval,
# max_key_interval, never under MIN_STRIDE frames), with a scene cut calling a key frame early; or
# "paper": MIN_STRIDE and MAX_STRIDE frames whatever the frame rate, no cuts.
KeyFramePacing = Literal["clock", "paper"]
KEY_FRAME_PACINGS: tuple[KeyFramePacing, ...] = ("clock", "paper")
_INTEGERS = ("min_stride", "max_stride", "max_updates")
_NUMBERS = (
    "threshold",
    "learning_rate",
    "object_weight",
    "box_dilation",
    "min_key_interval",
    "max_key_interval",
    "cut_threshold",
)


class AlgorithmParams(BaseModel):
    """Algorithms 1 and 2's parameters, immutable and checked on construction.

    Keyword construction validates like any pydantic model (a :class:`pydantic.ValidationError`,
    which is a ValueError, for a bad value; numbers given as text are converted). :meth:`from_dict`
    is stricter, for a peer's JSON. ``threshold`` is the paper's THRESHOLD; with
    ``threshold_policy`` "auto" it is where each session starts, and the session moves it
    (:mod:`shadowtutor.algorithms.threshold`). A ``threshold`` given as the text ``"auto"`` selects
    that policy from the default start (:func:`threshold_fields`).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    threshold: float = Field(
        0.8,
        description="THRESHOLD in (0, 1), the metric Algorithm 1 trains to and Algorithm 2 scales "
        "the stride against; or auto: each session sets the THRESHOLD of Algorithm 2 from the "
        "metrics its key frames reach, Algorithm 1 still trains to this value "
        "(docs/design/threshold_auto.md)",
    )
    min_stride: int = Field(
        8,
        description="Algorithm 2's MIN_STRIDE: fewest frames between key frames (with clock "
        "pacing: the floor under the seconds, and the earliest a scene cut calls one)",
    )
    max_stride: int = Field(
        64,
        description="Algorithm 2's MAX_STRIDE: most frames between key frames (paper pacing, or "
        "a source of unknown rate)",
    )
    key_frame_pacing: KeyFramePacing = Field(
        "paper",
        description="clock: strides bounded in seconds of the source (min/max key interval) and "
        "a scene cut calls a key frame; paper: MIN_STRIDE and MAX_STRIDE frames, no cuts "
        "(docs/design/clock.md)",
    )
    min_key_interval: float = Field(
        0.5,
        description="with clock pacing, fewest seconds between key frames the student's metric "
        "can ask for (>= 0; never under MIN_STRIDE frames)",
    )
    max_key_interval: float = Field(
        8.0,
        description="with clock pacing, most seconds between key frames (>= min key interval)",
    )
    cut_threshold: float = Field(
        0.08,
        description="with clock pacing, the change between consecutive frames (mean absolute "
        "difference of grey thumbnails, 0..1) that counts as a scene cut and calls a key frame "
        "after MIN_STRIDE frames; 1 never does",
    )
    max_updates: int = Field(
        8, description="Algorithm 1's MAX_UPDATES: most training steps per key frame"
    )
    learning_rate: float = Field(0.01, description="Adam's learning rate in Algorithm 1")
    mode: DistillMode = Field(
        "partial",
        description="which layers Algorithm 1 trains: partial (the back of the student) or full",
        json_schema_extra={"setting": "distill_mode"},
    )
    object_weight: float = Field(
        5.0, description="the loss's weight on pixels in the boxes of objects (> 0)"
    )
    box_dilation: float = Field(
        0.15,
        description="how much each object box grows per side before it is weighted, as a fraction "
        "of its size (>= 0)",
    )
    stride_metric: StrideMetric = Field(
        "after",
        description="the metric Algorithm 2 scales the stride by: after distillation (the paper) "
        "or before it (how the edge's student did on the key frame)",
    )
    restore: Restore = Field(
        "weights",
        description="what Algorithm 1 rolls back to its best student: the weights, or weights+adam "
        "(Adam's state too, as the authors do)",
    )
    weight_map: WeightMap = Field(
        "regions",
        description="the boxes the loss weights: the teacher's instances (the authors; label "
        "regions for a teacher without instances) or the regions of the label map",
    )
    threshold_policy: ThresholdPolicy = Field(
        "fixed",
        description="fixed: THRESHOLD as given (the paper); auto: each session sets its own (the "
        "same as THRESHOLD auto)",
    )

    @model_validator(mode="before")
    @classmethod
    def _auto_threshold(cls, data: Any) -> Any:
        """``threshold="auto"`` (any case) becomes ``threshold_policy="auto"`` at the default
        threshold."""
        if isinstance(data, dict) and isinstance(data.get("threshold"), str):
            return {
                **{k: v for k, v in data.items() if k != "threshold"},
                **threshold_fields(data["threshold"]),
            }
        return data

    @model_validator(mode="after")
    def _in_range(self) -> AlgorithmParams:
        for name in _NUMBERS:
            if not math.isfinite(getattr(self, name)):
                raise ValueError(f"{name} must be a finite number, got {getattr(self, name)!r}")
        if not 0.0 < self.threshold < 1.0:
            raise ValueError(f"threshold must lie in (0, 1), got {self.threshold}")
        if not 1 <= self.min_stride <= self.max_stride:
            raise ValueError(
                f"need 1 <= min_stride <= max_stride, got {self.min_stride}, {self.max_stride}"
            )
        if self.max_updates < 0:
            raise ValueError(f"max_updates must be >= 0, got {self.max_updates}")
        if self.learning_rate <= 0:
            raise ValueError(f"learning_rate must be > 0, got {self.learning_rate}")
        if self.object_weight <= 0:
            raise ValueError(f"object_weight must be > 0, got {self.object_weight}")
        if self.box_dilation < 0:
            raise ValueError(f"box_dilation must be >= 0, got {self.box_dilation}")
        if not 0.0 <= self.min_key_interval <= self.max_key_interval:
            raise ValueError(
                "need 0 <= min_key_interval <= max_key_interval, got "
                f"{self.min_key_interval}, {self.max_key_interval}"
            )
        if not 0.0 < self.cut_threshold <= 1.0:
            raise ValueError(f"cut_threshold must lie in (0, 1], got {self.cut_threshold}")
        return self

    def stride_bounds(self, fps: float | None) -> tuple[int, int]:
        """Algorithm 2's fewest and most frames between key frames on a source of ``fps`` frames a
        second (None: unknown).

        Paper pacing, or an unknown rate: ``(min_stride, max_stride)``. Clock pacing: the key
        intervals in frames (rounded), the lower never under ``min_stride``, the upper never under
        the lower."""
        if self.key_frame_pacing == "paper" or fps is None:
            return self.min_stride, self.max_stride
        if not 0.0 < fps <= 1000.0:
            raise ValueError(f"a source's frame rate lies in (0, 1000], got {fps}")
        low = max(self.min_stride, round(self.min_key_interval * fps))
        return low, max(low, round(self.max_key_interval * fps))

    @property
    def detects_cuts(self) -> bool:
        """Whether a scene cut calls a key frame (clock pacing with a threshold under 1)."""
        return self.key_frame_pacing == "clock" and self.cut_threshold < 1.0

    def to_dict(self) -> dict[str, Any]:
        """Every field by name, as JSON-ready values (what :meth:`from_dict` reads back)."""
        return self.model_dump()

    def replace(self, **changes: Any) -> AlgorithmParams:
        """A copy with ``changes``, validated like keyword construction."""
        return type(self)(**{**self.to_dict(), **changes})

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> AlgorithmParams:
        """The parameters in ``data``, as a peer sends them (other keys ignored, the defaults for
        missing ones).

        Strict: TypeError for a value of the wrong kind (an integer field given 8.5, true or "8"; a
        number field given text, null, NaN or infinity), ValueError for one out of range; each
        message names the field.
        """
        if not isinstance(data, dict):
            raise TypeError(f"parameters must be an object, got {type(data).__name__}")
        known = {k: data[k] for k in cls.model_fields if k in data}
        for name in _INTEGERS:
            value = known.get(name, 0)
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(f"{name} must be an integer, got {value!r}")
        for name in _NUMBERS:
            value = known.get(name, 0.5)
            if (
                isinstance(value, bool)
                or not isinstance(value, (int, float))
                or not math.isfinite(value)
            ):
                raise TypeError(f"{name} must be a finite number, got {value!r}")
        try:
            return cls(**known)
        except ValidationError as exc:
            raise ValueError(validation_message(exc)) from None


def threshold_fields(setting: float | str | None) -> dict[str, Any]:
    """The :class:`AlgorithmParams` fields one THRESHOLD setting gives (a flag's or a variable's
    value).

    A number (or its text) is the fixed THRESHOLD (``{"threshold": value}``); ``"auto"`` selects the
    auto policy from the default starting value (``{"threshold_policy": "auto"}``); None gives
    nothing (the defaults). Anything else raises ValueError naming both forms. The number's range is
    checked by :class:`AlgorithmParams`.
    """
    if setting is None:
        return {}
    if isinstance(setting, str):
        text = setting.strip().lower()
        if text == AUTO_THRESHOLD:
            return {"threshold_policy": "auto"}
        try:
            setting = float(text)
        except ValueError:
            raise ValueError(
                f"threshold must be a number in (0, 1) or {AUTO_THRESHOLD!r}, got {setting!r}"
            ) from None
    if isinstance(setting, bool) or not isinstance(setting, (int, float)):
        raise ValueError(
            f"threshold must be a number in (0, 1) or {AUTO_THRESHOLD!r}, got {setting!r}"
        )
    return {"threshold": float(setting)}
