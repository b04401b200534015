from __future__ import annotations

from pathlib import Path

from shadowtutor_lab.evaluation.harness import SceneEvaluation, SettingTrace
from shadowtutor_lab.evaluation.trace_store import load_trace, store_trace


def evaluation() -> SceneEvaluation:
    return SceneEvaluation("s", 4, 2, {"wild": SettingTrace(miou=[0.5, 0.25], strides=[8, 8])}, 1.5)


def test_a_trace_comes_back_only_for_the_same_configuration(tmp_path: Path) -> None:
    path = tmp_path / "traces" / "s.json"
    assert load_trace(path, {"a": 1}) is None
    store_trace(path, {"a": 1, "size": (4, 2)}, evaluation())
    assert load_trace(path, {"a": 1, "size": (4, 2)}) == evaluation()  # a tuple fingerprint matches its JSON
    assert load_trace(path, {"a": 2, "size": (4, 2)}) is None
    assert not list(path.parent.glob("*.tmp"))


def test_a_damaged_trace_is_run_again(tmp_path: Path) -> None:
    path = tmp_path / "s.json"
    path.write_text("{not json")
    assert load_trace(path, {}) is None
    path.write_text('{"config": {}, "evaluation": {"name": "s"}}')
    assert load_trace(path, {}) is None
