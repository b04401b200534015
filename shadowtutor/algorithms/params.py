"""The paper's algorithm parameters (section 5.3) in one typed place (no torch import)."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:  # a type only: this module stays free of torch, for the command line's parsers
    from shadowtutor.models.student import DistillMode

# Which metric Algorithm 2 scales the stride by: "after" distillation (the paper), or "before" it, the
# score the edge's current student got on the key frame (how stale it had become over the last stride).
StrideMetric = Literal["after", "before"]
STRIDE_METRICS: tuple[StrideMetric, ...] = ("after", "before")
# What Algorithm 1 restores when it ends on a worse student than its best: the trainable weights only, or
# the weights with Adam's state as it was then (the authors deep-copy the model with its optimiser).
Restore = Literal["weights", "weights+adam"]
RESTORES: tuple[Restore, ...] = ("weights", "weights+adam")
# Where the loss's object weight comes from: the teacher's instance boxes (the authors: every Mask R-CNN
# instance above its score threshold, any class), or boxes of the connected non-background regions of the
# label map (any teacher). "instances" falls back to "regions" for a teacher that gives no boxes.
WeightMap = Literal["instances", "regions"]
WEIGHT_MAPS: tuple[WeightMap, ...] = ("instances", "regions")
# How a session's THRESHOLD is chosen: "fixed" at ``threshold`` (the paper), or "auto": the session starts at
# ``threshold`` and sets it from what it measures on its own key frames (shadowtutor.algorithms.threshold).
ThresholdPolicy = Literal["fixed", "auto"]
THRESHOLD_POLICIES: tuple[ThresholdPolicy, ...] = ("fixed", "auto")
AUTO_THRESHOLD = "auto"  # the THRESHOLD setting (flag, server setting) that selects the "auto" policy


@dataclass(frozen=True)
class AlgorithmParams:
    """Algorithms 1 and 2's parameters; every value is checked on construction (TypeError, ValueError).

    ``threshold`` is the paper's THRESHOLD; with ``threshold_policy`` "auto" it is where each session
    starts, and the session moves it (:mod:`shadowtutor.algorithms.threshold`)."""

    threshold: float = 0.8
    min_stride: int = 8
    max_stride: int = 64
    max_updates: int = 8
    learning_rate: float = 0.01
    mode: DistillMode = "partial"
    object_weight: float = 5.0
    box_dilation: float = 0.15
    stride_metric: StrideMetric = "after"
    restore: Restore = "weights"
    weight_map: WeightMap = "regions"
    threshold_policy: ThresholdPolicy = "fixed"

    def __post_init__(self) -> None:
        # Checked by type first: the values may come from a peer's JSON (the WELCOME), where a stride
        # of 8.5 or true would otherwise pass the range checks and break the client loop's counting.
        for name in ("min_stride", "max_stride", "max_updates"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(f"{name} must be an integer, got {value!r}")
        for name in ("threshold", "learning_rate", "object_weight", "box_dilation"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise TypeError(f"{name} must be a finite number, got {value!r}")
        if not 0.0 < self.threshold < 1.0:
            raise ValueError(f"threshold must lie in (0, 1), got {self.threshold}")
        if not 1 <= self.min_stride <= self.max_stride:
            raise ValueError(f"need 1 <= min_stride <= max_stride, got {self.min_stride}, {self.max_stride}")
        if self.max_updates < 0:
            raise ValueError(f"max_updates must be >= 0, got {self.max_updates}")
        if self.learning_rate <= 0:
            raise ValueError(f"learning_rate must be > 0, got {self.learning_rate}")
        if self.mode not in ("partial", "full"):
            raise ValueError(f"mode must be 'partial' or 'full', got {self.mode!r}")
        if self.stride_metric not in STRIDE_METRICS:
            raise ValueError(f"stride_metric must be one of {STRIDE_METRICS}, got {self.stride_metric!r}")
        if self.restore not in RESTORES:
            raise ValueError(f"restore must be one of {RESTORES}, got {self.restore!r}")
        if self.weight_map not in WEIGHT_MAPS:
            raise ValueError(f"weight_map must be one of {WEIGHT_MAPS}, got {self.weight_map!r}")
        if self.threshold_policy not in THRESHOLD_POLICIES:
            raise ValueError(f"threshold_policy must be one of {THRESHOLD_POLICIES}, got {self.threshold_policy!r}")
        if self.object_weight <= 0:
            raise ValueError(f"object_weight must be > 0, got {self.object_weight}")
        if self.box_dilation < 0:
            raise ValueError(f"box_dilation must be >= 0, got {self.box_dilation}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> AlgorithmParams:
        """The parameters in ``data`` (other keys ignored); TypeError or ValueError for bad values."""
        if not isinstance(data, dict):
            raise TypeError(f"parameters must be an object, got {type(data).__name__}")
        known = {k: data[k] for k in cls.__dataclass_fields__ if k in data}
        return cls(**known)


def threshold_fields(setting: float | str | None) -> dict[str, Any]:
    """The :class:`AlgorithmParams` fields one THRESHOLD setting gives (a flag's or a server setting's value).

    A number (or its text) is the fixed THRESHOLD (``{"threshold": value}``); ``"auto"`` selects the auto
    policy from the default starting value (``{"threshold_policy": "auto"}``); None gives nothing (the
    defaults). Anything else raises ValueError naming both forms. The number's range is checked by
    :class:`AlgorithmParams`.
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
            raise ValueError(f"threshold must be a number in (0, 1) or {AUTO_THRESHOLD!r}, got {setting!r}") from None
    if isinstance(setting, bool) or not isinstance(setting, (int, float)):
        raise ValueError(f"threshold must be a number in (0, 1) or {AUTO_THRESHOLD!r}, got {setting!r}")
    return {"threshold": float(setting)}
