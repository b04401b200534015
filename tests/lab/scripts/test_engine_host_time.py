"""The engine's host-time split on the CPU with a few sessions: every phase timed, the phases adding up to the
batch, the collector watched, the startup heap frozen on request and unfrozen after."""

from __future__ import annotations

import gc
import json
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from tests.support.lab_scripts import loaded_script


@pytest.fixture(scope="module")
def script() -> Iterator[ModuleType]:
    with loaded_script("engine_host_time") as module:
        yield module


def test_a_batch_is_split_into_its_phases_with_the_heap_frozen(
    script: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "host.json"
    assert script.main(["--sessions", "2", "--batches", "2", "--freeze-heap", "--out", str(out)]) == 0
    assert gc.get_freeze_count() == 0  # the test process's heap is left as it was
    results = json.loads(out.read_text())
    ms = results["ms"]
    assert all(ms[name] > 0 for name in ("gather", "training", "scatter", "rest", "batch"))
    assert ms["gather"] + ms["training"] + ms["scatter"] < ms["batch"] and 0 < ms["outside_training"] < ms["batch"]
    assert results["frozen_objects"] > 10_000  # torch and the students, at least
    assert len(results["gc"]["passes_per_batch"]) == len(results["gc"]["ms_per_batch"]) == 3
    assert results["command"].startswith("python lab/scripts/engine_host_time.py --sessions 2")
    assert results["device"].startswith("CPU: ")
    assert "outside training" in capsys.readouterr().out


def test_the_collector_watch_counts_a_forced_pass(script: ModuleType) -> None:
    watch = script.CollectorWatch()
    with watch.installed():
        gc.collect(1)
    assert watch.passes == [0, 1, 0] and watch.seconds[1] > 0
    assert watch not in gc.callbacks


@pytest.mark.parametrize("argv", [["--sessions", "1"], ["--batches", "0"], ["--device", "gpu"], ["--device", "mps"]])
def test_bad_arguments_are_refused(script: ModuleType, argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as leaving:
        script.main(argv)
    assert leaving.value.code == 2 and f"error: {argv[0]}" in capsys.readouterr().err
