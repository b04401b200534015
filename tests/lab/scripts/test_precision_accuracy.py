"""The training-precision study on the CPU with a tiny scene: P-1 and P-8 per precision, the groups by backgrounds
and the verdict against the tolerance."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from shadowtutor_lab.scenes.generator import make_scene
from tests.support.lab_scripts import loaded_script


@pytest.fixture(scope="module")
def script() -> Iterator[ModuleType]:
    with loaded_script("precision_accuracy") as module:
        yield module


def test_each_precision_runs_the_partial_passes_of_every_scene(script: ModuleType, tmp_path: Path) -> None:
    scene = make_scene("fixed-people", 12, 3, tmp_path / "fixed-people-s3", size=(96, 64), progress=False)
    out = tmp_path / "out"
    code = script.main(["--scenes", str(scene), "--out", str(out), "--frames", "4", "--tolerance", "100"])
    result = json.loads((out / "precision_accuracy.json").read_text())
    assert code == 0 and result["precisions"] == ["fp32", "bf16"]
    assert result["groups"] == {"fixed-people-s3": "training backgrounds"}
    rows = result["scenes"]
    assert set(rows["fp32"]["fixed-people-s3"]) == {"p1_miou", "p8_miou", "p8_key_frames", "p8_mean_steps"}
    assert rows["fp32"]["fixed-people-s3"]["p8_key_frames"] >= 1
    summary = result["summary"]["training backgrounds"]
    assert summary["differences"]["bf16"]["p8_miou"] == pytest.approx(
        rows["bf16"]["fixed-people-s3"]["p8_miou"] - rows["fp32"]["fixed-people-s3"]["p8_miou"])
    markdown = (out / "precision_accuracy.md").read_text()
    assert result["command"] in markdown and "**holds**" in markdown


def test_a_group_holds_only_where_every_p8_difference_is_within_the_tolerance(script: ModuleType) -> None:
    rows = {"fp32": {"a": {"p1_miou": 60.0, "p8_miou": 50.0}, "b": {"p1_miou": 70.0, "p8_miou": 60.0}},
            "bf16": {"a": {"p1_miou": 61.0, "p8_miou": 49.0}, "b": {"p1_miou": 70.0, "p8_miou": 60.2}}}
    summary = script.compare(rows, {"a": "held-out backgrounds", "b": "training backgrounds"}, ["fp32", "bf16"], 0.5)
    assert summary["held-out backgrounds"]["differences"]["bf16"] == {"p1_miou": 1.0, "p8_miou": -1.0}
    assert not summary["held-out backgrounds"]["holds"] and summary["training backgrounds"]["holds"]
    both = script.compare(rows, {"a": "g", "b": "g"}, ["fp32", "bf16"], 0.5)["g"]
    assert both["means"]["fp32"]["p8_miou"] == 55.0 and both["holds"]
