from __future__ import annotations

import numpy as np
import pytest
import torch
from skimage import data

from shadowtutor.models.inference import onnx_available
from shadowtutor.models.student import StudentNet
from shadowtutor_lab.evaluation.student_bench import (
    StudentBenchConfig,
    latency_stats,
    render_markdown,
    run_student_bench,
)


def _photos(size: tuple[int, int], count: int) -> list[np.ndarray]:
    import cv2

    photos = (data.astronaut(), data.chelsea(), data.coffee())
    return [np.ascontiguousarray(cv2.resize(photos[i % 3][:, :, ::-1], size)) for i in range(count)]


def test_latency_stats() -> None:
    stats = latency_stats([0.01, 0.02, 0.03, 0.04])
    assert stats["mean_ms"] == pytest.approx(25.0) and stats["fps"] == pytest.approx(40.0)
    assert stats["p50_ms"] == pytest.approx(25.0) and 30.0 < stats["p90_ms"] <= 40.0


def test_every_backend_is_timed_and_agrees_with_the_reference() -> None:
    torch.manual_seed(0)
    backends = ("reference", "torch", "onnx") if onnx_available() else ("reference", "torch")
    config = StudentBenchConfig(sizes=((96, 64), (64, 48)), frames=2, warmup=1, backends=backends,
                                threads=(1,), update_trials=1)
    results = run_student_bench(StudentNet(9), _photos, config)
    assert [(r["size"], r["threads"]) for r in results["runs"]] == [("96x64", 1), ("64x48", 1)]
    for run in results["runs"]:
        assert set(run["backends"]) == set(backends)
        for stats in run["backends"].values():
            assert stats["mean_ms"] > 0 and stats["agreement"] >= 0.99
        assert run["backends"]["reference"]["agreement"] == 1.0
    assert set(results["update_ms"]["1"]) == set(backends)
    text = render_markdown({**results, "command": "shadowtutor bench student"})
    assert "| 96x64 | 1 | torch |" in text and "| 1 | reference |" in text


def test_the_unfused_tail_is_timed_beside_the_fused_one() -> None:
    torch.manual_seed(1)
    config = StudentBenchConfig(sizes=((96, 64),), frames=2, warmup=1, backends=("reference", "torch"),
                                threads=(1,), update_trials=1, unfused_tail=True)
    results = run_student_bench(StudentNet(9), _photos, config)
    run = results["runs"][0]["backends"]
    assert set(run) == {"reference", "torch", "torch (tail unfused)"}
    assert run["torch (tail unfused)"]["agreement"] >= 0.99


def test_the_reference_backend_is_required() -> None:
    with pytest.raises(ValueError, match="reference"):
        StudentBenchConfig(backends=("torch",))
    with pytest.raises(ValueError, match="unknown"):
        StudentBenchConfig(backends=("reference", "tensorrt"))
