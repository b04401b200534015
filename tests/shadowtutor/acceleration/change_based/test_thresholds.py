from __future__ import annotations

import json

import pytest

from shadowtutor.acceleration.change_based.thresholds import (
    FORMAT,
    THRESHOLD_NAMES,
    ThresholdFileError,
    load_thresholds,
    scaled,
    threshold_document,
    zero_thresholds,
)


def _write(tmp_path, document) -> str:
    path = tmp_path / "t.json"
    path.write_text(document if isinstance(document, str) else json.dumps(document))
    return path


def test_the_built_in_thresholds_cover_every_layer() -> None:
    thresholds = load_thresholds()
    assert tuple(thresholds) == THRESHOLD_NAMES
    assert all(v >= 0 for v in thresholds.values()) and any(v > 0 for v in thresholds.values())


def test_a_written_file_loads_back(tmp_path) -> None:
    values = {**zero_thresholds(), "in_conv1": 6.0, "output": 0.5}
    path = _write(tmp_path, threshold_document(values, "test"))
    assert load_thresholds(path) == values
    assert scaled(values, 2.0)["in_conv1"] == 12.0


@pytest.mark.parametrize(("document", "message"), [
    ("{not json", "not JSON"),
    ({"format": "other", "version": 1, "thresholds": {}}, "not a change-threshold file"),
    ({"format": FORMAT, "version": 9, "thresholds": {}}, "version 9"),
    ({"format": FORMAT, "version": 2, "thresholds": [1, 2]}, "must be an object"),
    ({"format": FORMAT, "version": 2, "thresholds": {**zero_thresholds(), "enc9": 1.0}}, "unknown layer names"),
    ({"format": FORMAT, "version": 2, "thresholds": {"in_conv1": 1.0}}, "no threshold for"),
    ({"format": FORMAT, "version": 2, "thresholds": {**zero_thresholds(), "enc1": -1}}, "finite number >= 0"),
    ({"format": FORMAT, "version": 2, "thresholds": {**zero_thresholds(), "enc1": "3"}}, "finite number >= 0"),
    ({"format": FORMAT, "version": 2, "thresholds": {**zero_thresholds(), "enc1": True}}, "finite number >= 0"),
])
def test_malformed_files_are_refused_with_the_reason(tmp_path, document, message) -> None:
    with pytest.raises(ThresholdFileError, match=message):
        load_thresholds(_write(tmp_path, document))


def test_a_version_1_file_loads_with_its_out_conv1_threshold_on_the_tail(tmp_path) -> None:
    old = {**{name: 0.1 for name in THRESHOLD_NAMES if name != "tail"}, "out_conv1": 0.3, "out_conv2": 0.7}
    loaded = load_thresholds(_write(tmp_path, {"format": FORMAT, "version": 1, "thresholds": old}))
    assert tuple(loaded) == THRESHOLD_NAMES
    assert loaded["tail"] == 0.3 and loaded["output"] == 0.1 and "out_conv2" not in loaded


def test_a_missing_file_is_a_clear_error(tmp_path) -> None:
    with pytest.raises(ThresholdFileError, match="cannot read"):
        load_thresholds(tmp_path / "absent.json")


def test_negative_scale_is_refused() -> None:
    with pytest.raises(ValueError, match="scale"):
        scaled(zero_thresholds(), -1)
