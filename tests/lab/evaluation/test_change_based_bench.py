from __future__ import annotations

import numpy as np
import pytest
import torch

from shadowtutor.acceleration.change_based.backend import ChangeBasedOptions
from shadowtutor.models.student import StudentNet
from shadowtutor_lab.evaluation.change_based_bench import cutover_point, render_markdown, run_change_based_bench
from shadowtutor_lab.evaluation.clips import Clip, load_clip


def test_cutover_is_the_first_bin_where_change_based_is_not_faster() -> None:
    samples = [(0.01, 0.2), (0.03, 0.3), (0.12, 0.7), (0.17, 0.9), (0.31, 1.1), (0.33, 0.95), (0.6, 1.4)]
    result = cutover_point(samples)
    assert result["cutover"] == pytest.approx(0.30)  # 30-35 % averages 1.025
    assert [row["frames"] for row in result["bins"]] == [2, 1, 1, 2, 1]


def test_a_small_run_reports_every_clip() -> None:
    torch.manual_seed(0)
    student = StudentNet(9).eval()
    rng = np.random.default_rng(0)
    background = rng.integers(0, 255, (32, 48, 3), dtype=np.uint8)
    frames = []
    for i in range(4):
        frame = background.copy()
        frame[4 + i: 12 + i, 4: 12] = 255
        frames.append(frame)
    truth = [np.zeros((32, 48), np.uint8)] * 4
    clip = Clip("synthetic", frames, truth)
    results = run_change_based_bench(student, [clip], ChangeBasedOptions(scale=0.0), threads=1, warmup=1)
    run = results["runs"][0]
    assert run["agreement"] == 1.0 and run["frames"] == 3
    assert set(run["miou"]) == {"torch", "change-based"} and run["miou"]["torch"] == run["miou"]["change-based"]
    assert sum(run["modes"].values()) == 3
    alone = run["fallback_off"]  # every frame change-based: exact at scale 0
    assert alone["agreement"] == 1.0 and alone["frames"] == 3 and set(alone["ms"]) == {"change-based", "onnx"}
    assert 1.0 <= alone["work_bound"] < 10  # a square moves: the first layers skip most positions, not all
    results.update(command="shadowtutor bench change-based ...", machine={})
    page = render_markdown(results)
    assert "| synthetic | 3 |" in page and "Every frame change-based" in page
    assert f"| {alone['work_bound']:.2f}x |" in page


def test_clip_specs_are_checked(tmp_path) -> None:
    with pytest.raises(ValueError, match="PRESET:SEED"):
        load_clip("fixed-people:x", 2, (64, 48))
    with pytest.raises(ValueError, match="neither"):
        load_clip(str(tmp_path / "missing.mp4"), 2, (64, 48))
