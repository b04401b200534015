from __future__ import annotations

import json
from pathlib import Path

import pytest

from shadowtutor_cli import main
from shadowtutor_lab.regions import bench


def test_bench_regions_writes_its_tables(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SHADOWTUTOR_CACHE_DIR", str(tmp_path / "cache"))
    out = tmp_path / "regions.json"
    assert main(["bench", "regions", "--frames", "16", "--size", "128x72", "--seeds", "5", "--decisions", "0.9:3",
                 "--budgets", "0.1:6", "--intervals", "2", "3", "--out", str(out)]) == 0
    results = json.loads(out.read_text())
    moving = results["groups"]["Moving camera (generated)"]["summary"]
    assert set(moving) == {"student", "dn@0.9/age3", "budget@0.1/age6", "fixed@2", "fixed@3"}
    assert 0 < moving["fixed@3"]["miou"] <= 1 and moving["student"]["speedup"] == 1
    spliced = results["groups"]["Spliced scenes, hard cuts (generated)"]["summary"]
    assert set(spliced) == set(moving) and 0 < spliced["fixed@2"]["miou"] <= 1
    assert [(r["method"], r["scale"], r["context"]) for r in results["flow_study"]] == list(bench.FLOW_STUDY)
    markdown = out.with_suffix(".md").read_text()
    assert "shadowtutor bench regions --frames 16" in markdown and "## Egocentric camera (generated)" in markdown
    assert set(results["groups"]["Patrol camera: travels and dwells (generated)"]["summary"]) == set(moving)


def test_bench_regions_bad_decision_setting(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["bench", "regions", "--decisions", "high"])
    assert "VALUE:MAX_KEY_AGE" in capsys.readouterr().err
