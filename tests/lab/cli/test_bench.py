from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from shadowtutor.classes import LVS_CLASSES
from shadowtutor.models.checkpoint import save_student
from shadowtutor.models.student import StudentNet
from shadowtutor_cli import build_parser, main
from shadowtutor_lab.scenes.generator import make_scene


@pytest.fixture(autouse=True)
def keep_torch_threads():
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def student(tmp_path: Path) -> Path:
    torch.manual_seed(0)
    return save_student(tmp_path / "student.pt", StudentNet(9), LVS_CLASSES)


def test_bench_has_the_accuracy_and_student_benchmarks() -> None:
    parser = build_parser()
    for benchmark in ("accuracy", "student"):
        with pytest.raises(SystemExit) as exit_info:
            parser.parse_args(["bench", benchmark, "--help"])
        assert exit_info.value.code == 0


def test_bench_accuracy_end_to_end(tmp_path: Path, student: Path, capsys: pytest.CaptureFixture[str]) -> None:
    scene = make_scene("moving-street", 12, 4, tmp_path / "moving-street-s4", size=(64, 48), progress=False)
    out = tmp_path / "out"
    code = main(["bench", "accuracy", "--scenes", str(scene), "--student", str(student), "--out", str(out),
                 "--size", "48x32", "--backend", "torch", "--threads", "1", "--no-progress", "--note", "tiny"])
    assert code == 0
    results = json.loads((out / "results.json").read_text())
    assert results["moving-street-s4"]["width"] == 48 and results["moving-street-s4"]["frames"] == 12
    assert "- tiny" in (out / "results.md").read_text()
    assert "moving-street-s4: Wild" in capsys.readouterr().out


def test_bench_accuracy_takes_the_algorithm_parameters(tmp_path: Path, student: Path) -> None:
    scene = make_scene("fixed-people", 10, 5, tmp_path / "fixed-people-s5", size=(64, 48), progress=False)
    out = tmp_path / "out"
    code = main(["bench", "accuracy", "--scenes", str(scene), "--student", str(student), "--out", str(out),
                 "--size", "48x32", "--backend", "torch", "--threads", "1", "--no-progress",
                 "--threshold", "0.6", "--min-stride", "2", "--max-stride", "4", "--max-updates", "1",
                 "--restore", "weights+adam", "--weight-map", "instances"])
    assert code == 0
    params = json.loads((out / "meta.json").read_text())["params"]
    assert (params["threshold"], params["min_stride"], params["max_stride"], params["max_updates"]) == (0.6, 2, 4, 1)
    assert (params["restore"], params["weight_map"]) == ("weights+adam", "instances")
    assert params["learning_rate"] == 0.01  # not given: the paper's
    result = json.loads((out / "results.json").read_text())["fixed-people-s5"]
    assert result["mean_distill_steps_partial"] <= 1
    assert result["key_frame_ratio"] >= 100 * 3 / 10  # a key frame at least every 4 frames


def test_bench_accuracy_runs_the_sparse_path_on_the_codec_link(tmp_path: Path, student: Path) -> None:
    scene = make_scene("fixed-people", 10, 5, tmp_path / "fixed-people-s5", size=(64, 48), progress=False)
    out = tmp_path / "out"
    code = main(["bench", "accuracy", "--scenes", str(scene), "--student", str(student), "--out", str(out),
                 "--size", "48x32", "--backend", "torch", "--threads", "1", "--no-progress", "--max-updates", "1",
                 "--codecs", "raw/q4sparse+zstd,f16+zstd", "--sparse-fraction", "0.05", "--sparse-every", "3",
                 "--sparse-choice", "gradient"])
    assert code == 0
    link = json.loads((out / "meta.json").read_text())["link"]
    assert (link["frame_codec"], link["weight_codec"], link["delta_codec"]) == ("raw", "f16+zstd", "q4sparse+zstd")
    assert link["sparse"] == {"fraction": 0.05, "every": 3, "choice": "gradient"}
    assert main(["bench", "accuracy", "--scenes", str(scene), "--codecs", "raw/q4sparse+zstd,f16+zstd",
                 "--sparse-fraction", "1.5", "--out", str(out)]) == 2


def test_bench_key_frame_scale_runs_the_sparse_path_with_the_given_share(tmp_path: Path, student: Path) -> None:
    scene = make_scene("fixed-people", 10, 5, tmp_path / "fixed-people-s5", size=(64, 48), progress=False)
    out = tmp_path / "out"
    code = main(["bench", "key-frame-scale", "--scenes", str(scene), "--student", str(student), "--out", str(out),
                 "--scales", "1", "--backend", "torch", "--no-progress", "--max-updates", "1",
                 "--codecs", "raw/q4sparse+zstd,f16+zstd", "--sparse-fraction", "0.05"])
    assert code == 0
    assert json.loads((out / "results.json").read_text())["meta"]["codecs"] == (
        "raw / q4sparse+zstd residual 0.05 (full: f16+zstd)")
    with pytest.raises(SystemExit, match="sparse fraction"):
        main(["bench", "key-frame-scale", "--scenes", str(scene), "--codecs", "raw/q4sparse+zstd,f16+zstd",
              "--sparse-fraction", "1.5", "--out", str(out)])


def test_bench_accuracy_refuses_out_of_range_algorithm_parameters(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "accuracy", "--scenes", "x", "--min-stride", "9", "--max-stride", "8"]) == 2
    assert "min_stride" in capsys.readouterr().err


def test_bench_accuracy_refuses_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "accuracy", "--scenes", str(tmp_path / "absent")]) == 2
    assert "absent" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["bench", "accuracy", "--scenes", "x", "--size", "big"])


def test_bench_student_writes_json_and_markdown(tmp_path: Path, student: Path) -> None:
    out = tmp_path / "student_bench.json"
    code = main(["bench", "student", "--sizes", "64x48", "--frames", "2", "--warmup", "1", "--threads", "1",
                 "--backends", "reference,torch", "--student", str(student), "--out", str(out)])
    assert code == 0
    results = json.loads(out.read_text())
    assert results["runs"][0]["size"] == "64x48" and results["machine"]["torch"]
    assert out.with_suffix(".md").read_text().startswith("# Student inference benchmark")
