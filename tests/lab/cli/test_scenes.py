"""``shadowtutor scenes``: make and list, and the errors a user sees."""

from __future__ import annotations

from pathlib import Path

import pytest

from shadowtutor.scene_store import Scene
from shadowtutor_cli import main
from shadowtutor_lab.scenes.presets import PRESETS


def test_list_prints_one_line_per_preset(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["scenes", "list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines] == list(PRESETS)
    assert "giraffe" in lines[0] and "cut every 300 frames" in lines[0]


def test_make_writes_a_scene(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "scene"
    code = main(["scenes", "make", "--preset", "moving-people", "--frames", "4", "--seed", "2",
                 "--out", str(out), "--size", "64x36", "--fps", "15", "--no-progress"])
    assert code == 0
    meta = Scene.open(out).meta
    assert (meta.preset, meta.frames, meta.seed, meta.size, meta.fps, meta.camera) == (
        "moving-people", 4, 2, (64, 36), 15.0, "moving")
    assert f"wrote {out}" in capsys.readouterr().out
    assert main(["scenes", "make", "--preset", "moving-people", "--frames", "4", "--out", str(out),
                 "--size", "64x36", "--no-progress"]) == 2
    assert "not empty (use --force" in capsys.readouterr().err
    assert main(["scenes", "make", "--preset", "moving-people", "--frames", "4", "--out", str(out),
                 "--size", "64x36", "--no-progress", "--force"]) == 0
    assert Scene.open(out).meta.seed == 0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--preset", "fixed-zebras"], "unknown scene preset 'fixed-zebras'"),
        (["--frames", "0"], "frames must be positive"),
        (["--size", "63x36"], "must be even"),
    ],
)
def test_bad_values_exit_with_a_message(tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str],
                                        message: str) -> None:
    base = {"--preset": "fixed-people", "--frames": "3", "--size": "64x36"}
    base.update(dict(zip(args[::2], args[1::2], strict=True)))
    argv = ["scenes", "make", "--out", str(tmp_path / "x"), "--no-progress", *sum(base.items(), ())]
    assert main(argv) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


def test_a_malformed_size_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["scenes", "make", "--preset", "fixed-people", "--frames", "3", "--out", "x", "--size", "big"])
    assert exit_info.value.code == 2
    assert "WIDTHxHEIGHT" in capsys.readouterr().err


def test_make_real_prints_the_scene_directory_of_a_real_clip(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], mediapipe_model: Path, real_clips: dict[str, Path]
) -> None:
    code = main(["scenes", "make-real", "--clip", "bikes", "--frames", "5", "--width", "96",
                 "--cache-dir", str(tmp_path)])
    assert code == 0
    directory = Path(capsys.readouterr().out.strip().splitlines()[-1])
    assert directory == tmp_path / "real" / "bikes_5f_96x40_mediapipe" and (directory / "scene.json").is_file()


def test_fetch_real_with_an_unknown_clip_is_a_clear_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["scenes", "fetch-real", "--clip", "nope"]) != 0
    assert "unknown real clip 'nope'" in capsys.readouterr().err


def test_make_with_held_out_backgrounds_records_them_and_the_command_remakes_the_scene(
        tmp_path: Path, held_out_photos: dict[str, Path]) -> None:
    from shadowtutor_lab.evaluation.accuracy import scene_command

    out = tmp_path / "held"
    args = ["--preset", "fixed-street", "--frames", "3", "--seed", "5", "--size", "64x36", "--no-progress"]
    assert main(["scenes", "make", *args, "--out", str(out), "--backgrounds", "held-out"]) == 0
    scene = Scene.open(out)
    assert scene.meta.backgrounds == "held-out" and '"backgrounds": "held-out"' in (out / "scene.json").read_text()
    command = scene_command(scene)
    assert command.endswith("--backgrounds held-out")
    again = tmp_path / "again"
    assert main(command.replace(str(out), str(again)).split()[1:] + ["--no-progress"]) == 0
    assert (again / "scene.json").read_bytes() == (out / "scene.json").read_bytes()
    assert (again / "labels" / "000002.png").read_bytes() == (out / "labels" / "000002.png").read_bytes()

    training = tmp_path / "training"
    assert main(["scenes", "make", *args, "--out", str(training)]) == 0
    assert Scene.open(training).meta.backgrounds == "training"
    assert "backgrounds" not in (training / "scene.json").read_text()  # scenes made before keep their bytes
    assert "--backgrounds" not in scene_command(Scene.open(training))


def test_make_with_an_unknown_background_set_is_a_usage_error(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["scenes", "make", "--preset", "fixed-street", "--frames", "3", "--out", str(tmp_path / "x"),
              "--backgrounds", "space"])
    assert "invalid choice: 'space'" in capsys.readouterr().err


def test_cut_interval_sets_the_cuts_and_the_command_remakes_the_scene(tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    from shadowtutor_lab.evaluation.accuracy import scene_command

    args = ["--preset", "moving-street", "--frames", "5", "--seed", "3", "--size", "64x36", "--no-progress"]
    for interval, cuts in (("0", ()), ("2", (2, 4))):
        out = tmp_path / f"every-{interval}"
        assert main(["scenes", "make", *args, "--out", str(out), "--cut-interval", interval]) == 0
        scene = Scene.open(out)
        assert scene.meta.cuts == cuts and scene.meta.cut_interval == int(interval)
        command = scene_command(scene)
        assert command.endswith(f"--cut-interval {interval}")
        again = tmp_path / f"again-{interval}"
        assert main(command.replace(str(out), str(again)).split()[1:] + ["--no-progress"]) == 0
        assert (again / "scene.json").read_bytes() == (out / "scene.json").read_bytes()
        assert (again / "labels" / "000004.png").read_bytes() == (out / "labels" / "000004.png").read_bytes()
    preset = tmp_path / "preset"
    assert main(["scenes", "make", *args, "--out", str(preset)]) == 0
    assert "cut_interval" not in (preset / "scene.json").read_text()  # scenes made before keep their bytes
    with pytest.raises(SystemExit) as exit_info:
        main(["scenes", "make", *args, "--out", str(tmp_path / "bad"), "--cut-interval", "-1"])
    assert exit_info.value.code == 2
    assert "expected a whole number >= 0, got -1" in capsys.readouterr().err


def test_make_real_takes_any_video_path(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                        mediapipe_model: Path) -> None:
    from shadowtutor_lab.evaluation.accuracy import scene_command

    scene = tmp_path / "scene"
    assert main(["scenes", "make", "--preset", "fixed-people", "--frames", "6", "--out", str(scene),
                 "--size", "128x72", "--no-progress"]) == 0
    video = tmp_path / "door camera.mp4"
    video.write_bytes((scene / "video.mp4").read_bytes())
    capsys.readouterr()
    assert main(["scenes", "make-real", "--clip", str(video), "--frames", "4", "--width", "64",
                 "--cache-dir", str(tmp_path / "cache")]) == 0
    directory = Path(capsys.readouterr().out.strip().splitlines()[-1])
    made = Scene.open(directory)
    assert (len(made), made.meta.size, made.meta.preset) == (4, (64, 36), "footage:door camera.mp4")
    assert scene_command(made) == (f"shadowtutor scenes make-real --clip '{video}' --frames 4 --width 64 "
                                   "--teacher mediapipe")


@pytest.mark.parametrize(
    ("clip", "extra", "message"),
    [
        ("vtset", [], "'vtset' is neither a packaged clip (vtest, bikes, carphone) nor a video file"),
        ("{tmp}", [], "is neither a packaged clip"),  # a folder
        ("{tmp}/notes.mp4", [], "cannot open file source"),
        ("{tmp}/notes.mp4", ["--sample-fps", "7"], "re-sampling (--sample-fps) takes a packaged clip"),
    ],
)
def test_make_real_bad_input_is_one_error_line(tmp_path: Path, capsys: pytest.CaptureFixture[str], clip: str,
                                               extra: list[str], message: str) -> None:
    (tmp_path / "notes.mp4").write_text("not a video\n")
    code = main(["scenes", "make-real", "--clip", clip.format(tmp=tmp_path), *extra,
                 "--cache-dir", str(tmp_path / "cache")])
    err = capsys.readouterr().err
    assert code == 2 and message in err
    assert err.count("\n") == 1 and "Traceback" not in err
