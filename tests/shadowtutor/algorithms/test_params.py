"""Algorithm parameters: the paper's defaults, and the WELCOME's ``params`` object as a peer may send it."""

from __future__ import annotations

import math
import re
from typing import get_args

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from shadowtutor.algorithms.params import AlgorithmParams, DistillMode, threshold_fields


def test_defaults_are_the_papers() -> None:
    params = AlgorithmParams()
    assert (params.threshold, params.min_stride, params.max_stride, params.max_updates) == (0.8, 8, 64, 8)
    assert (params.learning_rate, params.mode, params.object_weight) == (0.01, "partial", 5.0)
    assert params.stride_metric == "after"  # Algorithm 2 as written: the metric after distillation
    assert params.threshold_policy == "fixed"


def test_round_trip_through_a_dict() -> None:
    params = AlgorithmParams(threshold=0.7, min_stride=4, max_stride=32, max_updates=3, mode="full",
                             threshold_policy="auto")
    assert AlgorithmParams.from_dict(params.to_dict()) == params
    assert AlgorithmParams.from_dict({**params.to_dict(), "future_key": 1}) == params


@pytest.mark.parametrize(
    ("field", "value", "error"),
    [
        ("min_stride", 8.5, TypeError),  # the MIN_STRIDE wait would never fire
        ("max_stride", True, TypeError),
        ("max_updates", "8", TypeError),
        ("threshold", None, TypeError),
        ("threshold", math.nan, TypeError),
        ("learning_rate", math.inf, TypeError),
        ("threshold", 1.0, ValueError),
        ("min_stride", 0, ValueError),
        ("max_updates", -1, ValueError),
        ("mode", "half", ValueError),
        ("object_weight", 0, ValueError),
        ("box_dilation", -0.1, ValueError),
        ("stride_metric", "median", ValueError),
        ("threshold_policy", "adaptive", ValueError),
    ],
)
def test_bad_values_are_refused_with_the_fields_name(field: str, value: object, error: type[Exception]) -> None:
    with pytest.raises(error, match=field):
        AlgorithmParams.from_dict({field: value})


@pytest.mark.parametrize(
    ("setting", "fields"),
    [(None, {}), (0.7, {"threshold": 0.7}), ("0.65", {"threshold": 0.65}), ("auto", {"threshold_policy": "auto"}),
     (" Auto ", {"threshold_policy": "auto"}), (2, {"threshold": 2.0})],  # the range is AlgorithmParams' to check
)
def test_a_threshold_setting_is_a_number_or_auto(setting: object, fields: dict[str, object]) -> None:
    assert threshold_fields(setting) == fields  # type: ignore[arg-type]


@pytest.mark.parametrize("setting", ["fast", "", True, [0.8]])
def test_any_other_threshold_setting_names_both_forms(setting: object) -> None:
    with pytest.raises(ValueError, match=r"a number in \(0, 1\) or 'auto'"):
        threshold_fields(setting)  # type: ignore[arg-type]


def test_keyword_construction_converts_text_and_checks_ranges() -> None:
    assert AlgorithmParams(max_updates="3", threshold="0.7") == AlgorithmParams(max_updates=3, threshold=0.7)
    assert AlgorithmParams(threshold="Auto").threshold_policy == "auto"
    with pytest.raises(ValidationError, match=re.escape("threshold must lie in (0, 1), got 1.5")):
        AlgorithmParams(threshold=1.5)
    with pytest.raises(ValidationError, match="threshold must be a finite number, got nan"):
        AlgorithmParams(threshold=math.nan)
    with pytest.raises(ValidationError, match="Extra inputs are not permitted"):
        AlgorithmParams(stride=8)  # type: ignore[call-arg]


def test_params_are_immutable_values() -> None:
    params = AlgorithmParams(max_updates=3)
    with pytest.raises(ValidationError, match="frozen"):
        params.max_updates = 4  # type: ignore[misc]
    assert params.replace(mode="full") == AlgorithmParams(max_updates=3, mode="full")
    assert hash(params) == hash(AlgorithmParams(max_updates=3)) and params != AlgorithmParams()
    with pytest.raises(ValidationError, match="min_stride <= max_stride"):
        params.replace(min_stride=100)


def test_the_distill_modes_are_the_students() -> None:
    from shadowtutor.models.student import DistillMode as StudentModes

    assert get_args(DistillMode) == get_args(StudentModes)
    assert get_args(AlgorithmParams.model_fields["mode"].annotation) == get_args(StudentModes)


def test_a_non_object_is_refused() -> None:
    with pytest.raises(TypeError, match="object"):
        AlgorithmParams.from_dict([8, 64])  # type: ignore[arg-type]


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=6,
)
FIELDS = st.sampled_from(list(AlgorithmParams.model_fields) + ["other"])


@given(st.dictionaries(FIELDS, JSON_VALUES | st.integers(0, 100) | st.floats(0, 1), max_size=9))
def test_any_params_object_gives_valid_params_or_a_clear_error(data: dict[str, object]) -> None:
    try:
        params = AlgorithmParams.from_dict(data)
    except (TypeError, ValueError) as exc:
        assert str(exc)
        return
    for name in ("min_stride", "max_stride", "max_updates"):
        value = getattr(params, name)
        assert type(value) is int and value >= 0
    assert 1 <= params.min_stride <= params.max_stride
    assert 0 < params.threshold < 1 and math.isfinite(params.learning_rate) and params.learning_rate > 0
    assert params.mode in ("partial", "full")


def test_clock_pacing_bounds_strides_in_seconds_of_the_source() -> None:
    assert AlgorithmParams().key_frame_pacing == "paper"
    params = AlgorithmParams(key_frame_pacing="clock")
    assert (params.min_key_interval, params.max_key_interval) == (0.5, 8.0)
    assert params.stride_bounds(30.0) == (15, 240)
    # never under MIN_STRIDE frames: at 10 FPS 0.5 s is 5 frames
    assert params.stride_bounds(10.0) == (8, 80)
    assert params.stride_bounds(None) == (8, 64)
    assert AlgorithmParams().stride_bounds(30.0) == (8, 64)
    assert params.detects_cuts and not AlgorithmParams(key_frame_pacing="clock", cut_threshold=1.0).detects_cuts
    assert not AlgorithmParams().detects_cuts
    with pytest.raises(ValueError, match="frame rate"):
        params.stride_bounds(0.0)


@pytest.mark.parametrize(
    "changes",
    [{"min_key_interval": -1.0}, {"min_key_interval": 3.0, "max_key_interval": 2.0}, {"cut_threshold": 0.0},
     {"key_frame_pacing": "frames"}],
)
def test_bad_pacing_is_refused(changes: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        AlgorithmParams(**changes)


def test_a_peer_without_the_pacing_fields_gets_the_defaults() -> None:
    # an older server's WELCOME carries only the paper's fields
    old = {k: v for k, v in AlgorithmParams().to_dict().items() if "key" not in k and "cut" not in k}
    assert AlgorithmParams.from_dict(old) == AlgorithmParams()
