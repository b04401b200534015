"""The operating-point sweep: key-frame ratio against P-8 over a THRESHOLD x MIN_STRIDE grid, its Pareto
front, and the point recommended for a target.

A *point* is one run of P-8 (partial distillation, updates landing 8 frames after their key frame; the
accuracy bench's P-8) at one THRESHOLD setting (a number, or the ``auto`` policy) and MIN_STRIDE, everything
else as configured. Lower key-frame
ratio and higher P-8 mIoU are better; a point is on the Pareto front when no other point is at least as
good in both and better in one. A :class:`Target` picks one point:

* ``key_frames`` (``--target-key-frames 5%``): the best P-8 among points at most that key-frame ratio;
* ``miou`` (``--target-miou 70``): the lowest key-frame ratio among points with at least that P-8;
* ``uplink`` (``--uplink-budget 300kbps``): the best P-8 among points whose uplink per camera (bits/s)
  fits the budget.

Ties go to the fewer key frames, then the higher P-8, then the first point given (``evaluate`` gives the
configured parameters first). When no point meets the
target, the recommendation is the point nearest to it (fewest key frames, best P-8, or least uplink)
and says that the target is not met.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

from shadowtutor.config.rates import format_rate

TargetKind = Literal["key_frames", "miou", "uplink"]


def threshold_setting(threshold: float, policy: str) -> str:
    """The ``--threshold`` value of a THRESHOLD and its policy: the number, or ``auto``."""
    return "auto" if policy == "auto" else f"{threshold:g}"


@dataclass(frozen=True)
class Point:
    threshold: float  # THRESHOLD (policy "auto": where each session starts)
    min_stride: int
    key_frame_ratio: float  # percent
    p8_miou: float  # percent
    uplink_bps: float  # bits per second per camera at the footage's frame rate
    mean_stride: float
    mean_steps: float | None  # distillation steps per key frame
    policy: str = "fixed"  # THRESHOLD policy: "fixed" or "auto"

    @property
    def setting(self) -> str:
        """The ``--threshold`` value that runs this point: the number, or ``auto``."""
        return threshold_setting(self.threshold, self.policy)

    @property
    def key(self) -> tuple[str, int]:
        return self.setting, self.min_stride

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "setting": self.setting}


@dataclass(frozen=True)
class Target:
    kind: TargetKind
    value: float  # percent key frames, percent mIoU, or bits per second

    def describe(self) -> str:
        if self.kind == "key_frames":
            return f"at most {self.value:g} % key frames, the best P-8"
        if self.kind == "miou":
            return f"P-8 at least {self.value:g} %, the fewest key frames"
        return f"uplink at most {format_rate(self.value)} per camera, the best P-8"


def parse_percent(text: str) -> float:
    """``5%`` or ``5`` -> 5.0 (a percentage in [0, 100])."""
    try:
        value = float(text.strip().removesuffix("%"))
    except ValueError:
        raise ValueError(f"expected a percentage such as 5% , got {text!r}") from None
    if not 0 <= value <= 100:
        raise ValueError(f"a percentage lies in 0..100, got {text!r}")
    return value


def pareto_front(points: Sequence[Point]) -> list[Point]:
    """The points no other point dominates, by increasing key-frame ratio."""
    def dominates(a: Point, b: Point) -> bool:
        return (a.key_frame_ratio <= b.key_frame_ratio and a.p8_miou >= b.p8_miou
                and (a.key_frame_ratio < b.key_frame_ratio or a.p8_miou > b.p8_miou))

    front = [p for p in points if not any(dominates(q, p) for q in points)]
    return sorted(front, key=lambda p: (p.key_frame_ratio, -p.p8_miou))


@dataclass(frozen=True)
class Recommendation:
    point: Point
    target: Target
    met: bool

    def to_dict(self) -> dict[str, Any]:
        return {"point": self.point.to_dict(), "target": asdict(self.target), "target_text": self.target.describe(),
                "met": self.met}


def recommend(points: Sequence[Point], target: Target) -> Recommendation:
    """The point ``target`` asks for (see the module docstring); ValueError without points."""
    if not points:
        raise ValueError("no operating points to choose from")
    order = {id(p): i for i, p in enumerate(points)}

    def best_miou(p: Point) -> tuple[float, float, int]:
        return (-p.p8_miou, p.key_frame_ratio, order[id(p)])

    def fewest_key_frames(p: Point) -> tuple[float, float, int]:
        return (p.key_frame_ratio, -p.p8_miou, order[id(p)])

    if target.kind == "key_frames":
        meeting = [p for p in points if p.key_frame_ratio <= target.value]
        if meeting:
            return Recommendation(min(meeting, key=best_miou), target, True)
        return Recommendation(min(points, key=fewest_key_frames), target, False)
    if target.kind == "miou":
        meeting = [p for p in points if p.p8_miou >= target.value]
        if meeting:
            return Recommendation(min(meeting, key=fewest_key_frames), target, True)
        return Recommendation(min(points, key=best_miou), target, False)
    meeting = [p for p in points if p.uplink_bps <= target.value]
    if meeting:
        return Recommendation(min(meeting, key=best_miou), target, True)
    return Recommendation(min(points, key=lambda p: (p.uplink_bps, *best_miou(p))), target, False)
