from __future__ import annotations

import json
from pathlib import Path

import pytest

from shadowtutor_lab.capacity.profile import SCHEMA, ProfileError, load_profile, shipped_profiles


def profile(**changes: object) -> dict:
    data = {
        "schema": SCHEMA, "device": "NVIDIA H200", "measured": "2026-11-26", "command": "shadowtutor bench server",
        "teacher": "maskrcnn",
        "sizes": {"1280x720": {"teacher_ms": 14.2, "step_ms": 1.8, "key_frame_ms": 20.5, "steps": 8, "sessions": 64},
                  "640x360": {"teacher_ms": 5.0, "step_ms": 0.9, "key_frame_ms": 12.0, "steps": 8, "sessions": 64}},
    }
    data.update(changes)
    return data


def write(tmp_path: Path, data: object, name: str = "server.json") -> Path:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return path


def test_a_valid_profile_loads(tmp_path: Path) -> None:
    loaded = load_profile(write(tmp_path, profile()))
    assert loaded.device == "NVIDIA H200"
    assert loaded.teacher == "maskrcnn"
    assert loaded.sizes[1280, 720].key_frame_ms == 20.5
    assert loaded.to_dict()["sizes"]["640x360"]["teacher_ms"] == 5.0


def test_nearest_size_by_pixel_count(tmp_path: Path) -> None:
    loaded = load_profile(write(tmp_path, profile()))
    assert loaded.nearest_size((1280, 720)) == (1280, 720)
    assert loaded.nearest_size((1920, 1080)) == (1280, 720)
    assert loaded.nearest_size((320, 180)) == (640, 360)


def test_key_frame_time_is_rescaled_only_when_the_steps_differ(tmp_path: Path) -> None:
    size = load_profile(write(tmp_path, profile())).sizes[1280, 720]
    assert size.key_frame_ms_at(8) == 20.5  # the measurement itself
    assert size.key_frame_ms_at(None) == 20.5
    assert size.key_frame_ms_at(2.5) == pytest.approx(14.2 + 1.8 * 2.5)


def _sizes_with(field: str, value: object) -> dict:
    sizes = profile()["sizes"]
    sizes["1280x720"] = {**sizes["1280x720"], field: value}
    return sizes


@pytest.mark.parametrize(("data", "problem"), [
    ("{not json", "not JSON"),
    ([1, 2], "JSON object"),
    (profile(schema="shadowtutor.server_profile/2"), "schema"),
    (profile(device=""), "'device'"),
    (profile(measured="26/11/2026"), "ISO date"),
    (profile(sizes={}), "non-empty"),
    (profile(sizes={"1280*720": profile()["sizes"]["1280x720"]}), "WxH"),
    (profile(sizes={"0x720": profile()["sizes"]["1280x720"]}), "WxH"),
    (profile(sizes=_sizes_with("teacher_ms", -1)), "teacher_ms"),
    (profile(sizes=_sizes_with("step_ms", 0)), "step_ms"),
    (profile(sizes=_sizes_with("key_frame_ms", "20")), "key_frame_ms"),
    (profile(sizes=_sizes_with("sessions", True)), "sessions"),
    ('{"schema": "shadowtutor.server_profile/1", "device": "x", "measured": "2026-01-01", "command": "c", '
     '"teacher": "t", "sizes": {"1x1": {"teacher_ms": NaN, "step_ms": 1, "key_frame_ms": 1, "steps": 1, '
     '"sessions": 1}}}', "teacher_ms"),
    (profile(sizes={"1280x720": {"teacher_ms": 1.0}}), "lacks"),
])
def test_a_corrupt_profile_is_one_line_naming_file_and_problem(tmp_path: Path, data: object, problem: str) -> None:
    path = write(tmp_path, data)
    with pytest.raises(ProfileError) as error:
        load_profile(path)
    message = str(error.value)
    assert "\n" not in message
    assert str(path) in message and problem in message


def test_a_missing_profile_is_a_profile_error(tmp_path: Path) -> None:
    with pytest.raises(ProfileError, match="cannot read"):
        load_profile(tmp_path / "absent.json")


def test_the_shipped_profiles_are_valid() -> None:
    for shipped in shipped_profiles():
        assert shipped.sizes
        assert Path(shipped.path).name.endswith(".json")


def test_what_bench_server_writes_is_a_profile_this_loader_accepts(tmp_path: Path) -> None:
    """The contract between `shadowtutor bench server --profile-out` and the capacity planner."""
    from shadowtutor_lab.evaluation.server_bench import BenchPoint, server_profile

    def measured(stage: str, rate: float, steps: float | None) -> BenchPoint:
        return BenchPoint((1280, 720), 64, stage, "torch", 640, 10.0, rate, 20.0, 30.0, steps, None)

    points = [measured("teacher", 70.0, None), measured("distill", 60.0, 8.0), measured("both", 48.0, 7.5)]
    written = server_profile(points, {"device": "NVIDIA H200", "teacher": "maskrcnn"}, "shadowtutor bench server",
                             "2026-11-26")
    loaded = load_profile(write(tmp_path, written))
    size = loaded.sizes[1280, 720]
    assert size.key_frame_ms == pytest.approx(1000 / 48.0) and size.steps == 7.5 and size.sessions == 64
    assert size.key_frame_ms_at(7.5) == size.key_frame_ms


def test_a_profile_says_which_teacher_weights_it_measured(tmp_path: Path) -> None:
    stated = load_profile(write(tmp_path, profile(teacher_weights="random")))
    assert stated.teacher_weights == "random" and stated.to_dict()["teacher_weights"] == "random"
    line = stated.provenance()
    assert line.startswith("server.json: NVIDIA H200, measured 2026-11-26, teacher maskrcnn with random weights")
    assert line.endswith("made by `shadowtutor bench server`")
    assert load_profile(write(tmp_path, profile(), "old.json")).teacher_weights == "not stated in the profile"
    with pytest.raises(ProfileError, match="'teacher_weights' must be a non-empty string"):
        load_profile(write(tmp_path, profile(teacher_weights=""), "bad.json"))


def test_the_shipped_profile_is_the_h200_with_random_weights() -> None:
    """The only shipped profile (docs/deploy/budgets.md says so): an H200 with an untrained teacher."""
    (shipped,) = shipped_profiles()
    assert shipped.device == "NVIDIA H200" and shipped.teacher_weights == "random"
