"""The local server's ``shadowtutor serve`` arguments: the scene's labels only go with the labels teacher.

A real run with another teacher (Mask R-CNN from a weights file) is in tests/lab/cli/test_bench_load.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from shadowtutor_lab.stress.load_run import LoadConfig, LoadError, local_serve_args, serve_settings

SCENE = Path("/scenes/moving-street")


def serve_args(*server_args: str) -> list[str]:
    return local_serve_args(LoadConfig(edges=2, minutes=1, rate=1, server_args=server_args), SCENE, 8123)


def test_without_a_teacher_flag_the_scene_labels_teach() -> None:
    args = serve_args("--max-updates", "2")
    settings = serve_settings(args)
    assert (settings["teacher"], settings["labels_dir"]) == ("labels", str(SCENE))
    assert settings["max_updates"] == 2 and settings["port"] == 8123 and settings["device"] == "cpu"


@pytest.mark.parametrize("teacher", [["--teacher", "maskrcnn"], ["--teacher=onnx"], ["--teacher", "mediapipe"]])
def test_another_teacher_gets_no_labels_dir(teacher: list[str]) -> None:
    args = serve_args(*teacher, "--weights-path", "/w/maskrcnn.pt")
    assert "--labels-dir" not in args and "labels" not in args
    settings = serve_settings(args)
    assert settings["teacher"] == teacher[-1].removeprefix("--teacher=") and settings["labels_dir"] is None
    assert settings["weights_path"] == "/w/maskrcnn.pt"


def test_the_labels_teacher_named_keeps_the_scene_unless_given_another_directory() -> None:
    assert serve_settings(serve_args("--teacher", "labels"))["labels_dir"] == str(SCENE)
    given = serve_settings(serve_args("--teacher", "labels", "--labels-dir", "/mine"))
    assert given["labels_dir"] == "/mine"


def test_a_later_device_flag_wins() -> None:
    assert serve_settings(serve_args("--teacher", "maskrcnn", "--device", "cuda:1"))["device"] == "cuda:1"


@pytest.mark.parametrize("flags, message", [
    (["--bogus"], "not 'shadowtutor serve' flags: --bogus"),
    (["--teacher"], "argument --teacher: expected one argument"),
])
def test_bad_server_arguments_are_one_clear_error(flags: list[str], message: str) -> None:
    with pytest.raises(LoadError, match="bad server arguments") as caught:
        serve_args(*flags)
    assert message in str(caught.value)
