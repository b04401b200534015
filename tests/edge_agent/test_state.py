"""The edge's state file: the weights it held last, loaded at start when the server does not answer."""

from __future__ import annotations

import logging
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from edge_agent.state import LocalStudent, StateKeeper, initial_student, load_state, save_state, state_path
from shadowtutor.classes import LVS_CLASSES
from shadowtutor.models.student import StudentNet


def weights(seed: int) -> dict[str, torch.Tensor]:
    torch.manual_seed(seed)
    return {name: value.clone() for name, value in StudentNet(len(LVS_CLASSES)).state_dict().items()}


def same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_round_trip_keeps_weights_and_where_they_came_from(tmp_path: Path) -> None:
    path = state_path(tmp_path / "state", "cam/1 north")
    assert path.name == "cam_1_north.student.pt"
    saved = LocalStudent(
        tensors=weights(1),
        class_names=LVS_CLASSES,
        origin="state",
        server="ws://server:8000/v1/edge",
        session_id="abc",
        version=17,
        saved_at=1234.5,
    )
    save_state(path, saved)
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temporary file left
    loaded = load_state(path, LVS_CLASSES)
    assert loaded is not None and same(loaded.tensors, saved.tensors)
    assert loaded.describe() == {
        "origin": "state",
        "server": "ws://server:8000/v1/edge",
        "session_id": "abc",
        "version": 17,
        "saved_at": 1234.5,
    }


@pytest.mark.parametrize("damage", ["truncated", "garbage", "other classes", "not a state file"])
def test_a_damaged_or_foreign_state_file_is_logged_and_the_packaged_student_used(
    tmp_path: Path, damage: str, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "edge.student.pt"
    save_state(
        path,
        LocalStudent(
            tensors=weights(1), class_names=LVS_CLASSES, origin="state", server="ws://s", session_id="abc", version=3
        ),
    )
    if damage == "truncated":
        path.write_bytes(path.read_bytes()[:5000])
    elif damage == "garbage":
        path.write_bytes(b"\x00not a torch file")
    elif damage == "other classes":
        save_state(path, LocalStudent(tensors=weights(1), class_names=(*LVS_CLASSES[:-1], "sky"), origin="state"))
    else:
        torch.save({"state_dict": weights(1)}, path)
    with caplog.at_level(logging.WARNING, logger="edge_agent.state"):
        assert load_state(path, LVS_CLASSES) is None
        start = initial_student(path, LVS_CLASSES)
    assert "ignoring the edge state file" in caplog.text
    assert start is not None and start.origin == "packaged" and start.session_id is None


def test_the_saved_weights_win_over_the_packaged_student(tmp_path: Path) -> None:
    path = tmp_path / "edge.student.pt"
    assert initial_student(path, LVS_CLASSES).origin == "packaged"  # no file yet
    save_state(
        path,
        LocalStudent(
            tensors=weights(2), class_names=LVS_CLASSES, origin="state", server="ws://s", session_id="abc", version=5
        ),
    )
    start = initial_student(path, LVS_CLASSES)
    assert start.origin == "state" and start.version == 5 and same(start.tensors, weights(2))


def test_no_student_of_its_own_for_other_classes(tmp_path: Path) -> None:
    assert initial_student(tmp_path / "none.pt", ("a", "b")) is None  # the edge then waits for the server


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_the_keeper_saves_at_most_every_interval_and_at_flush(tmp_path: Path) -> None:
    path, clock, dropped = tmp_path / "edge.student.pt", Clock(), []
    keeper = StateKeeper(path, "ws://s", 60, on_dropped=lambda: dropped.append(1), clock=clock)
    keeper.held(weights(1), LVS_CLASSES, "abc", 0)  # the first is saved at once
    clock.now = 30
    keeper.held(weights(2), LVS_CLASSES, "abc", 1)  # too soon: kept for later
    assert keeper.saves == 1 and load_state(path, LVS_CLASSES).version == 0
    clock.now = 61
    keeper.held(weights(3), LVS_CLASSES, "abc", 2)
    keeper.held(weights(4), LVS_CLASSES, "abc", 3)
    assert keeper.saves == 2 and load_state(path, LVS_CLASSES).version == 2
    keeper.flush()  # at the end of the run: the last weights held
    keeper.flush()  # nothing new: no write
    loaded = load_state(path, LVS_CLASSES)
    assert keeper.saves == 3 and loaded.version == 3 and same(loaded.tensors, weights(4)) and not dropped


def test_a_save_that_fails_is_counted_and_does_not_raise(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")
    dropped = []
    keeper = StateKeeper(blocker / "edge.student.pt", "ws://s", 0, on_dropped=lambda: dropped.append(1))
    keeper.held(weights(1), LVS_CLASSES, "abc", 0)  # the state directory cannot be made: an OSError
    assert dropped == [1] and keeper.saves == 0


def test_state_files_are_private_and_a_killed_writer_s_temporary_is_removed(tmp_path: Path) -> None:
    path = state_path(tmp_path / "state", "cam-1")
    path.parent.mkdir()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()  # a process id that no longer runs: the writer that was killed mid-save
    left = path.with_name(f".{path.name}.{dead.pid}.tmp")
    left.write_bytes(b"half a checkpoint")
    mine = path.with_name(f".{path.name}.{os.getpid()}.tmp")  # a live writer's (this process) is kept
    mine.write_bytes(b"being written")
    assert load_state(path, LVS_CLASSES) is None
    assert not left.exists() and mine.exists()
    left.write_bytes(b"half a checkpoint")
    mine.unlink()
    save_state(path, LocalStudent(tensors=weights(1), class_names=LVS_CLASSES, origin="state"))
    assert [p.name for p in path.parent.iterdir()] == [path.name]
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_a_local_student_is_built_field_by_field() -> None:
    with pytest.raises(TypeError):
        LocalStudent({}, "packaged", "/nowhere", None)  # type: ignore[misc]
