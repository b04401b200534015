"""The content rules of TELEMETRY (docs/protocol.md, "8 TELEMETRY") beyond the header's types.

:func:`check_telemetry` is what a receiver runs on a decoded :class:`Telemetry`: counters are
non-negative integers below 2**63, durations finite and non-negative, the student's metric in
[0, 1], each histogram a :class:`HistogramSnapshot` in its wire form, and each labelled figure an
object whose keys come from a fixed set (:data:`LABELS`: the values the server exports as labels,
so an edge cannot add series at will). A breach is ``bad_message``, like a header of the wrong type.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeGuard

from shadowtutor.protocol.errors import ErrorCode, ProtocolError
from shadowtutor.protocol.messages import Telemetry
from shadowtutor.protocol.student_layers import STUDENT_LAYERS

# bounds per histogram: what one edge may add to the server's series
MAX_BUCKETS = 32
MAX_COUNT = 2**63 - 1
COUNTERS = (
    "frames",
    "key_frames",
    "updates_applied",
    "resyncs",
    "reconnects",
    "bytes_sent",
    "bytes_received",
)
OPTIONAL_COUNTS = (
    "key_frames_dropped",
    "labels_removed",
    "cluster_workers",
    "region_queue_depth",
    "key_frames_deferred",
    "uplink_budget_bps",
    "downlink_budget_bps",
)
HISTOGRAMS = ("inference_seconds", "blocked_seconds", "roundtrip_seconds", "region_key_age_frames")
# the edge's outputs (edge_agent.sinks)
OUTPUTS = ("labels", "overlay", "state")
# how a frame of the change-based student ran
CHANGE_MODES = ("change", "full", "fallback")
# shadowtutor.acceleration.regions.labeller.SEGMENT and FLOW
REGION_PATHS = ("segment", "flow")
# Labelled counters: field -> the keys it may have (each key's value a count).
LABELS = {"output_dropped": OUTPUTS, "change_based_frames": CHANGE_MODES, "regions": REGION_PATHS}


@dataclass(frozen=True)
class HistogramSnapshot:
    """A histogram's state: ``counts[i]`` observations in bucket ``i`` (not cumulative); bucket
    ``i`` holds values up to ``bounds[i]``, the last one (``counts[-1]``) those above every
    bound."""

    bounds: tuple[float, ...]
    counts: tuple[int, ...]
    sum: float

    @property
    def count(self) -> int:
        return sum(self.counts)

    def cumulative(self) -> list[tuple[float, int]]:
        """``(upper bound, observations up to it)`` per bucket, the last bound ``inf``: Prometheus'
        buckets."""
        totals, running = [], 0
        for bound, count in zip((*self.bounds, math.inf), self.counts, strict=True):
            running += count
            totals.append((bound, running))
        return totals

    def to_wire(self) -> dict[str, Any]:
        return {"buckets": list(self.bounds), "counts": list(self.counts), "sum": self.sum}

    @classmethod
    def from_cumulative(
        cls, buckets: Sequence[tuple[float, float]], total: float
    ) -> HistogramSnapshot:
        """From Prometheus-style ``(upper bound, cumulative count)`` pairs ending with ``inf``, and
        the sum."""
        bounds = tuple(bound for bound, _ in buckets[:-1])
        cumulative = [int(count) for _, count in buckets]
        counts = tuple(c - p for c, p in zip(cumulative, [0, *cumulative[:-1]], strict=True))
        return cls(bounds, counts, float(total))

    @classmethod
    def from_wire(cls, field_name: str, value: dict[str, Any]) -> HistogramSnapshot:
        def bad(why: str) -> ProtocolError:
            return ProtocolError(ErrorCode.BAD_MESSAGE, f"TELEMETRY.{field_name}: {why}")

        bounds, counts, total = value.get("buckets"), value.get("counts"), value.get("sum")
        if not isinstance(bounds, list) or not all(
            _is_number(b) and math.isfinite(b) for b in bounds
        ):
            raise bad("buckets must be a list of finite numbers")
        if not 0 < len(bounds) <= MAX_BUCKETS or any(
            a >= b for a, b in zip(bounds[:-1], bounds[1:], strict=True)
        ):
            raise bad(f"buckets must be 1 to {MAX_BUCKETS} strictly increasing bounds")
        if (
            not isinstance(counts, list)
            or len(counts) != len(bounds) + 1
            or not all(map(_is_count, counts))
        ):
            raise bad(
                "counts must be one non-negative integer per bucket plus one above the last bound"
            )
        if sum(counts) > MAX_COUNT:
            raise bad("more observations than a counter holds")
        if not (_is_number(total) and math.isfinite(total)):
            raise bad("sum must be a finite number")
        return cls(tuple(float(b) for b in bounds), tuple(counts), float(total))


@dataclass(frozen=True)
class EdgeReport:
    """A checked TELEMETRY: the message and its histograms (absent ones omitted)."""

    telemetry: Telemetry
    histograms: dict[str, HistogramSnapshot]


def check_telemetry(message: Telemetry) -> EdgeReport:
    """``message`` if its values obey the protocol, with its histograms parsed; else
    ``bad_message``."""

    def require(ok: bool, field_name: str, rule: str) -> None:
        if not ok:
            value = getattr(message, field_name)
            raise ProtocolError(
                ErrorCode.BAD_MESSAGE, f"TELEMETRY.{field_name} = {value!r:.40}: must be {rule}"
            )

    for name in COUNTERS:
        require(_is_count(getattr(message, name)), name, f"an integer in [0, {MAX_COUNT}]")
    require(_duration(message.waited_seconds), "waited_seconds", "finite and >= 0")
    require(
        message.stride is None or 1 <= message.stride <= MAX_COUNT,
        "stride",
        "null or a positive integer",
    )
    metric = message.student_metric
    require(metric is None or 0.0 <= metric <= 1.0, "student_metric", "null or in [0, 1]")
    version = message.weights_version
    require(
        version is None or _is_count(version), "weights_version", "null or a non-negative integer"
    )
    since = message.seconds_since_update
    require(since is None or _duration(since), "seconds_since_update", "null, or finite and >= 0")
    for name in OPTIONAL_COUNTS:
        value = getattr(message, name)
        require(value is None or _is_count(value), name, f"null or an integer in [0, {MAX_COUNT}]")
    for name, keys in LABELS.items():
        value = getattr(message, name)
        require(
            value is None or _keyed(value, keys, _is_count),
            name,
            f"null or an object of {'/'.join(keys)} -> integer in [0, {MAX_COUNT}]",
        )
    fractions = message.changed_fraction
    require(
        fractions is None or _keyed(fractions, STUDENT_LAYERS, _is_fraction),
        "changed_fraction",
        "null or an object of the student's layer names -> number in [0, 1]",
    )
    histograms = {
        name: HistogramSnapshot.from_wire(name, getattr(message, name))
        for name in HISTOGRAMS
        if getattr(message, name) is not None
    }
    return EdgeReport(message, histograms)


def _is_number(value: Any) -> TypeGuard[float]:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _keyed(value: dict[str, Any], keys: Sequence[str], valid: Callable[[Any], bool]) -> bool:
    return all(key in keys and valid(item) for key, item in value.items())


def _is_fraction(value: Any) -> bool:
    return _is_number(value) and 0.0 <= value <= 1.0


def _is_count(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_COUNT


def _duration(value: float) -> bool:
    return math.isfinite(value) and value >= 0.0
