"""The seven presets of the paper's categories, the patrol camera, and preset validation."""

from __future__ import annotations

import dataclasses

import pytest

from shadowtutor_lab.scenes.presets import PRESETS, get_preset

PAPER_CATEGORIES = ("fixed-animals", "fixed-people", "fixed-street", "moving-animals", "moving-people",
                    "moving-street", "egocentric-people")


def test_the_papers_seven_categories() -> None:
    assert sorted(PRESETS) == sorted([*PAPER_CATEGORIES, "patrol-street"])
    for name in PAPER_CATEGORIES:
        preset = PRESETS[name]
        camera, category = name.split("-")
        assert preset.name == name and preset.camera.regime == camera and preset.category == category
        assert preset.description and preset.camera.dwell_s is None
    assert set(PRESETS["fixed-animals"].classes) == {"bird", "dog", "horse", "elephant", "giraffe"}
    assert set(PRESETS["moving-people"].classes) == {"person", "bicycle"}
    assert set(PRESETS["fixed-street"].classes) == {"person", "bicycle", "auto"}


def test_the_patrol_camera_is_the_moving_street_camera_that_dwells() -> None:
    patrol, street = PRESETS["patrol-street"], PRESETS["moving-street"]
    assert patrol.camera.regime == "moving" and patrol.camera.dwell_s is not None
    assert dataclasses.replace(patrol.camera, dwell_s=None) == street.camera
    assert (patrol.category, patrol.class_mix, patrol.objects) == (street.category, street.class_mix, street.objects)


def test_long_scenes_are_cut_more_often_by_faster_cameras() -> None:
    intervals = {p.camera.regime: p.cut_interval for p in PRESETS.values()}
    assert intervals["fixed"] > intervals["moving"] > intervals["egocentric"]
    assert max(intervals.values()) < 600  # a 600-frame benchmark scene has a cut


def test_invalid_presets_are_refused() -> None:
    base = PRESETS["fixed-people"]
    with pytest.raises(ValueError, match="distinct object classes"):
        dataclasses.replace(base, class_mix=(("person", 1.0), ("zebra", 1.0)))
    with pytest.raises(ValueError, match="distinct object classes"):
        dataclasses.replace(base, class_mix=(("background", 1.0),))
    with pytest.raises(ValueError, match="min objects"):
        dataclasses.replace(base, objects=(1, 4))
    with pytest.raises(ValueError, match="cut_interval"):
        dataclasses.replace(base, cut_interval=0)
    with pytest.raises(ValueError, match="category"):
        dataclasses.replace(base, category="space")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="unknown scene preset 'fixed'; known: fixed-animals"):
        get_preset("fixed")
