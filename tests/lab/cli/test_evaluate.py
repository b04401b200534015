"""``shadowtutor evaluate`` end to end on a clip the project never saw, its report in headless Chromium, and
bad input as one error line with exit status 2."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import cv2
import numpy as np
import pytest
import torch

from shadowtutor_cli import build_parser, main
from shadowtutor_lab.capacity.profile import SCHEMA
from shadowtutor_lab.scenes.generator import make_scene

FRAMES = 24


@pytest.fixture(scope="module")
def clip(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A short clip of a scene made for this test (a seed and held-out backgrounds nothing else uses)."""
    scene = make_scene("fixed-people", FRAMES, 9173, tmp_path_factory.mktemp("made") / "scene", size=(128, 72),
                       progress=False, backgrounds="held-out")
    path = tmp_path_factory.mktemp("footage") / "my.mp4"
    shutil.copy(scene / "video.mp4", path)
    return path


def _profile(path: Path, **changes: object) -> Path:
    data = {"schema": SCHEMA, "device": "test server", "measured": "2026-11-26", "command": "written by the test",
            "teacher": "mediapipe",
            "sizes": {"128x72": {"teacher_ms": 4.0, "step_ms": 2.0, "key_frame_ms": 20.0, "steps": 8,
                                 "sessions": 1}}}
    data.update(changes)
    path.write_text(json.dumps(data))
    return path


def _args(clip: Path, out: Path, cache: Path, *extra: str) -> list[str]:
    return ["evaluate", str(clip), "--out", str(out), "--cache-dir", str(cache), "--frames", str(FRAMES),
            "--threads", "1", "--no-progress", "--sweep-thresholds", "0.5,0.8", "--sweep-min-strides", "8",
            "--strip", "1", *extra]


@pytest.fixture(scope="module")
def report(clip: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from shadowtutor.teachers.mediapipe import default_model_path

    if not default_model_path().is_file():
        pytest.skip("the mediapipe teacher is not installed: run scripts/bootstrap.sh")
    threads = torch.get_num_threads()
    root = tmp_path_factory.mktemp("evaluate")
    try:
        code = main(_args(clip, root / "out", root / "cache", "--server-profile", str(_profile(root / "p.json")),
                          "--target-key-frames", "10%"))
    finally:
        torch.set_num_threads(threads)
    assert code == 0
    return root / "out"


def test_evaluate_takes_every_bench_accuracy_option() -> None:
    parser = build_parser()
    commands = parser._subparsers._group_actions[0].choices  # argparse keeps subcommands here
    accuracy = commands["bench"]._subparsers._group_actions[0].choices["accuracy"]
    evaluate = commands["evaluate"]
    flags = {flag for action in evaluate._actions for flag in action.option_strings}
    wanted = {flag for action in accuracy._actions for flag in action.option_strings} - {"--scenes"}
    assert wanted <= flags, wanted - flags


def test_evaluate_writes_the_report_and_every_number(report: Path, clip: Path) -> None:
    results = json.loads((report / "results.json").read_text())
    video = results["videos"]["my.mp4"]
    assert video["frames"] == FRAMES and video["size"] == [128, 72]
    for key in ("wild_miou", "shadowtutor_miou", "naive_miou"):
        assert len(video["per_frame"][key]) == FRAMES
        assert all(0.0 <= v <= 100.0 for v in video["per_frame"][key])
    assert video["per_frame"]["key_frames"][0] == 0
    traffic = video["traffic"]
    assert traffic["naive"]["up_bytes_per_frame"] > traffic["shadowtutor"]["up_bytes_per_frame"] > 0
    assert traffic["shadowtutor"]["up_bytes_per_hour"] == pytest.approx(
        traffic["shadowtutor"]["up_bytes_per_frame"] * video["fps"] * 3600)
    sweep = video["sweep"]
    assert {(p["threshold"], p["min_stride"]) for p in sweep["points"]} == {(0.5, 8), (0.8, 8)}
    assert sweep["pareto"] and sweep["recommendation"]["target"] == {"kind": "key_frames", "value": 10.0}
    capacity = video["capacity"]
    assert [s["device"] for s in capacity["servers"]][-1] == "test server"
    mine = capacity["servers"][-1]
    camera = capacity["camera"]
    assert mine["cameras"] == int(mine["key_frames_per_second"] // camera["key_frames_per_second"])
    assert capacity["t_si"] > 0 and mine["bounds"]["throughput_fps_min"] > 0
    assert results["meta"]["params"]["threshold"] == 0.8  # the paper's parameters by default


def test_the_report_is_self_contained(report: Path) -> None:
    page = (report / "report.html").read_text()
    assert "<script" not in page
    sources = re.findall(r"""(?:src|href)=['"]([^'"]+)""", page)  # xlink:href too
    assert sources and all(s.startswith(("data:", "#")) for s in sources)
    assert "url(http" not in page and "@import" not in page


def test_the_teacher_labels_come_from_the_cache_the_second_time(clip: Path, report: Path, tmp_path: Path) -> None:
    threads = torch.get_num_threads()
    cache = report.parent / "cache"
    try:
        assert main(_args(clip, tmp_path / "again", cache, "--sweep-thresholds", "0.8,auto")) == 0
    finally:
        torch.set_num_threads(threads)
    video = json.loads((tmp_path / "again" / "results.json").read_text())["videos"]["my.mp4"]
    assert video["labels_from_cache"]
    # the sweep runs the auto THRESHOLD policy beside the fixed one
    assert {(p["setting"], p["policy"]) for p in video["sweep"]["points"]} == {("0.8", "fixed"), ("auto", "auto")}


def _chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    pytest.skip("headless Chromium is not installed (.ci/install-system-deps.sh installs Debian's chromium)")


def test_headless_chromium_renders_the_report(report: Path, tmp_path: Path) -> None:
    chromium = _chromium()
    url = (report / "report.html").resolve().as_uri()
    common = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run",
              "--enable-logging=stderr", "--v=0", f"--user-data-dir={tmp_path / 'profile'}"]
    dom = subprocess.run([*common, "--dump-dom", url], capture_output=True, text=True, timeout=120, check=True)
    assert "CONSOLE" not in dom.stderr, dom.stderr  # no console messages, errors included
    html = dom.stdout
    for plot in ("per-frame-plot", "sweep-plot", "traffic-plot"):
        assert re.search(rf"<figure class=\"plot {plot}\"><svg", html), plot
    assert re.search(r"<div id=\"recommendation-my.mp4\" class=\"recommendation[^\"]*\">"
                     r"<strong>Recommended operating point:</strong> THRESHOLD", html)
    assert "cameras per server" in html and "test server" in html
    assert html.count("<img class=\"strip\"") >= 1
    shot = tmp_path / "report.png"
    subprocess.run([*common, "--window-size=1200,2400", f"--screenshot={shot}", url], capture_output=True,
                   timeout=120, check=True)
    image = cv2.imread(str(shot))
    assert image is not None and image.shape[:2] == (2400, 1200)
    drawn = np.any(image < 200, axis=2)  # pixels clearly darker than the white page
    assert drawn.mean() > 0.02, "the screenshot is (nearly) blank"
    assert np.any(np.abs(image[..., 2].astype(int) - image[..., 0].astype(int)) > 60)  # colour: plots, strip


def _error_line(capsys: pytest.CaptureFixture[str], code: int) -> str:
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert code == 2, captured.err
    assert len(lines) == 1, captured.err
    assert "Traceback" not in captured.err
    return lines[0]


def test_not_a_video_is_one_error_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    notes = tmp_path / "notes.mp4"
    notes.write_text("not a video\n")
    line = _error_line(capsys, main(_args(notes, tmp_path / "out", tmp_path / "cache")))
    assert line.startswith("shadowtutor evaluate: error:") and "notes.mp4" in line


def test_a_video_with_no_frames_is_one_error_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    empty = tmp_path / "empty.avi"
    cv2.VideoWriter(str(empty), cv2.VideoWriter_fourcc(*"MJPG"), 10, (64, 48)).release()
    line = _error_line(capsys, main(_args(empty, tmp_path / "out", tmp_path / "cache")))
    assert "empty.avi" in line


def test_a_bad_sweep_threshold_is_one_error_line(clip: Path, tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main([*_args(clip, tmp_path / "out", tmp_path / "cache"), "--sweep-thresholds", "0.5,1.5"])
    assert exit_info.value.code == 2
    assert "--sweep-thresholds" in capsys.readouterr().err


def test_zero_frames_is_one_error_line(clip: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main([*_args(clip, tmp_path / "out", tmp_path / "cache"), "--frames", "0"])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2
    assert [line for line in err.splitlines() if "error:" in line] == [
        "shadowtutor evaluate: error: argument --frames: expected a positive integer, got 0"]


@pytest.mark.parametrize("teacher", ["oracle", "labels"])
def test_an_unknown_teacher_is_one_error_line(clip: Path, tmp_path: Path, teacher: str,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    line = _error_line(capsys, main([*_args(clip, tmp_path / "out", tmp_path / "cache"), "--teacher", teacher]))
    assert "teacher" in line and not (tmp_path / "cache").exists()


def test_a_corrupt_profile_is_one_error_line(clip: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = _profile(tmp_path / "bad.json", sizes={"128x72": {"teacher_ms": -4.0, "step_ms": 2.0, "key_frame_ms": 20.0,
                                                             "steps": 8, "sessions": 1}})
    line = _error_line(capsys, main([*_args(clip, tmp_path / "out", tmp_path / "cache"), "--server-profile",
                                     str(bad)]))
    assert str(bad) in line and "teacher_ms" in line and not (tmp_path / "cache").exists()


def test_the_usage_page_opens_with_evaluating_ones_own_footage() -> None:
    root = Path(__file__).resolve().parents[3]
    usage = (root / "docs" / "usage.md").read_text()
    first = usage.split("\n## ")[1]
    assert "own footage" in first.splitlines()[0]
    assert ".venv/bin/shadowtutor evaluate my.mp4" in first
    assert "shadowtutor evaluate my.mp4" in (root / "README.md").read_text()
