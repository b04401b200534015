"""The teacher lab script end to end on the CPU with tiny settings: random weights created on the
way, one timed frame, the JSON it writes; and its refusal of bad flags."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from tests.support.lab_scripts import loaded_script

REPO = Path(__file__).resolve().parents[3]
SCRIPT = REPO / "lab" / "scripts" / "teacher_gpu_check.py"


@pytest.fixture(scope="module")
def script() -> Iterator[ModuleType]:
    with loaded_script("teacher_gpu_check") as module:
        yield module


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), *args], cwd=REPO, capture_output=True, text=True,
                          timeout=600)


@pytest.mark.slow
def test_tiny_cpu_run_writes_its_figures(tmp_path: Path) -> None:
    weights, out = tmp_path / "w" / "random.pth", tmp_path / "r.json"
    done = run("--weights-path", str(weights), "--size", "128x72", "--min-size", "72", "--max-size", "128",
               "--frames", "1", "--batches", "1", "--precisions", "fp32,bf16", "--device", "cpu",
               "--score-threshold", "0.05", "--cudnn-benchmark", "--out", str(out))
    assert done.returncode == 0, done.stderr
    assert weights.is_file()
    results = json.loads(out.read_text())
    assert results["device_name"] == "cpu" and results["size"] == "128x72" and results["weights"] == "random (created)"
    assert results["command"].startswith("python lab/scripts/teacher_gpu_check.py --weights-path")
    assert results["detections_per_frame"] > 0
    (row,) = results["batches"]
    assert row["batch"] == 1 and all(row[k] > 0 for k in ("teacher_ms", "forward_ms", "detect_ms"))
    assert results["host_path"]["agreement"] == 1.0  # the device painting gives the host path's labels
    fp32, bf16, autotuned = results["precisions"]
    assert autotuned["precision"] == "fp32+cudnn.benchmark" and autotuned["ms"] > 0
    assert autotuned["agreement_with_fp32"] == 1.0  # on a CPU the autotuner changes nothing
    assert fp32["precision"] == "fp32" and fp32["agreement_with_fp32"] == 1.0 and fp32["recommended"]
    assert bf16["precision"] == "bf16" and 0 < bf16["agreement_with_fp32"] <= 1
    assert fp32["painted_agreement_with_fp32"] == 1.0 and 0 <= bf16["painted_agreement_with_fp32"] <= 1
    assert bf16["recommended"] == (bf16["agreement_with_fp32"] >= 0.995)
    assert "host path as it was" in done.stdout


def test_bad_flags_are_one_line_errors(
    script: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """In process (the tiny run above runs the script as a program): exit code 2 and one line naming the flag."""
    for flags, message in [(["--size", "720p"], "expected WIDTHxHEIGHT"), (["--batches", "0"], "positive batch"),
                           (["--precisions", "fp16"], "precision must be one of"),
                           (["--device", "tpu"], "unknown device 'tpu'")]:
        try:
            code = script.main(["--weights-path", str(tmp_path / "w.pth"), *flags])
        except SystemExit as exc:  # argparse's refusal
            code = exc.code
        error = capsys.readouterr().err
        assert code == 2 and message in error and "Traceback" not in error, (flags, error)


def test_agreement_of_all_and_of_painted_pixels(script: ModuleType) -> None:
    import numpy as np

    a = np.array([[0, 0, 1, 1]], np.uint8)
    b = np.array([[0, 1, 1, 0]], np.uint8)  # background 0: three pixels painted in either, one alike
    assert script.agreement([a], [b]) == 0.5
    assert script.agreement([a], [b], background=0) == 1 / 3
    assert script.agreement([a * 0], [b * 0], background=0) == 1.0


def test_frames_from_a_video_are_resized_and_repeated(script: ModuleType, tmp_path: Path) -> None:
    import cv2
    import numpy as np

    path = tmp_path / "clip.mp4"
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"mp4v"), 5, (64, 48))
    for value in (40, 200):
        writer.write(np.full((48, 64, 3), value, np.uint8))
    writer.release()
    frames = script.read_frames(path, 3, 32, 16)
    assert [f.shape for f in frames] == [(16, 32, 3)] * 3
    assert abs(int(frames[0].mean()) - 40) < 8 and abs(int(frames[1].mean()) - 200) < 8
    assert (frames[2] == frames[0]).all()
    with pytest.raises(script.TeacherError, match="no frames"):
        script.read_frames(tmp_path / "absent.mp4", 1, 32, 16)
    noise = script.read_frames(None, 2, 8, 4)
    assert noise[0].shape == (4, 8, 3) and noise[0].dtype == np.uint8
