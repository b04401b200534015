"""The results file: round trip, replacing a re-run, and clear errors for files it cannot read."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from shadowtutor_lab.netbench.results import FORMAT, Results, ResultsError, ServerWork
from tests.lab.netbench.test_analysis import shadow_run


def test_save_and_load_round_trip(tmp_path: Path) -> None:
    results = Results(meta={"command": "x"}, scenes={"s": {"camera": "fixed"}},
                      links=[{"mbps": 8.0, "bytes": 1, "up_mbps": 7.6, "down_mbps": 7.7}])
    results.add(shadow_run())
    results.add(shadow_run(bandwidth_mbps=8.0))
    path = tmp_path / "r" / "results.json"
    results.save(path)
    loaded = Results.load(path)
    assert loaded == results
    assert isinstance(loaded.runs[0].server, ServerWork)
    assert loaded.bandwidths() == [80.0, 8.0] and loaded.variants() == ["shadowtutor"]
    assert loaded.has("s", 8.0, "shadowtutor") and not loaded.has("s", 8.0, "naive-raw")


def test_a_rerun_replaces_the_earlier_record() -> None:
    results = Results(scenes={"s": {}})
    results.add(shadow_run(miou_percent=50.0))
    results.add(shadow_run(miou_percent=60.0))
    assert len(results.runs) == 1 and results.run("s", 80.0, "shadowtutor").miou_percent == 60.0


@pytest.mark.parametrize(
    ("content", "match"),
    [(None, "no results file"), ("{", "cannot read"), ('{"format": "other"}', "not a"),
     (json.dumps({"format": FORMAT, "scenes": {}, "runs": [{"scene": "s"}]}), "does not fit"),
     (json.dumps({"format": FORMAT, "scenes": {}, "runs": []}) , None)],
)
def test_unreadable_files_are_clear_errors(tmp_path: Path, content: str | None, match: str | None) -> None:
    path = tmp_path / "results.json"
    if content is not None:
        path.write_text(content)
    if match is None:
        assert Results.load(path).runs == []
    else:
        with pytest.raises(ResultsError, match=match):
            Results.load(path)


def test_runs_of_undescribed_scenes_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "results.json"
    Results(scenes={}, runs=[shadow_run()]).save(path)
    with pytest.raises(ResultsError, match="does not describe"):
        Results.load(path)
