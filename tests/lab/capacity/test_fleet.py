"""fleet_size and `shadowtutor bench fleet`: GPUs = ceil(cameras / cameras per GPU) from a profile,
the utilisation those GPUs run at, one clear error for a camera no GPU can carry, and the
committed result is what the command computes from the shipped profiles today."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from shadowtutor_cli import main
from shadowtutor_lab.capacity.fleet import fleet_size
from shadowtutor_lab.capacity.plan import CameraLoad
from shadowtutor_lab.capacity.profile import ServerProfile, SizeProfile

RESULT = Path(__file__).resolve().parents[3] / "docs" / "results" / "fleet" / "h200-1280x720.json"


def _profile(key_frame_ms: float) -> ServerProfile:
    size = SizeProfile(teacher_ms=key_frame_ms / 2, step_ms=key_frame_ms / 16, key_frame_ms=key_frame_ms,
                       steps=8.0, sessions=64)
    return ServerProfile("test.json", "GPU", "2026-01-01", "bench server", "maskrcnn", {(1280, 720): size})


def _load(ratio: float, fps: float = 30.0) -> CameraLoad:
    return CameraLoad(fps, ratio, None, (1280, 720), 0.0, 0.0)


def test_gpus_are_the_ceiling_of_cameras_over_cameras_per_gpu() -> None:
    # 40 ms per key frame: 25 key frames/s per GPU; 30 fps x 10 % = 3 per camera: 8 cameras per GPU.
    fleet = fleet_size(_profile(40.0), _load(0.1), 100)
    assert (fleet.cameras_per_gpu, fleet.gpus) == (8, 13)
    assert fleet.utilisation == pytest.approx(100 * 3 / (13 * 25))
    assert fleet_size(_profile(40.0), _load(0.1), 8).gpus == 1
    assert fleet_size(_profile(40.0), _load(0.1), 9).gpus == 2


def test_a_camera_no_gpu_can_carry_is_an_error() -> None:
    with pytest.raises(ValueError, match="more than one GPU sustains"):
        fleet_size(_profile(100.0), _load(1.0, fps=60.0), 10)
    with pytest.raises(ValueError, match="at least one camera"):
        fleet_size(_profile(40.0), _load(0.1), 0)


def test_bad_ratio_is_one_clear_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["bench", "fleet", "--key-frame-ratio", "demo=1.5"])
    assert exit_.value.code == 2
    assert "expected LABEL=R with R in (0, 1]" in capsys.readouterr().err


def test_the_committed_result_is_what_the_command_gives(tmp_path: Path) -> None:
    committed = json.loads(RESULT.read_text())
    argv = shlex.split(committed["command"])[1:]
    out = tmp_path / "fleet.json"
    argv[argv.index("--out") + 1] = str(out)
    assert main(argv) == 0
    rows = json.loads(out.read_text())["rows"]
    strip = [{k: v for k, v in row.items() if k != "profile"} for row in rows]
    assert strip == [{k: v for k, v in row.items() if k != "profile"} for row in committed["rows"]]
    assert {(row["ratio_label"], row["cameras"]) for row in rows} == {
        (label, n) for label in ("demo", "threshold-auto") for n in (100, 1000)}


def test_bench_fleet_says_which_profiles_it_used_and_how_they_were_made(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "fleet.json"
    assert main(["bench", "fleet", "--key-frame-ratio", "demo=0.1", "--cameras", "10", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "- h200-maskrcnn.json: NVIDIA H200, measured 2026-11-26, teacher maskrcnn with random weights" in printed
    assert "made by `shadowtutor bench server" in printed
    assert "A teacher with random weights times the network's computation" in printed
    (used,) = json.loads(out.read_text())["profiles"]
    assert (used["file"], used["teacher_weights"]) == ("h200-maskrcnn.json", "random")
    assert "--weights-path /tmp/maskrcnn_random.pt" in used["command"]
