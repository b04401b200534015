"""The key-frame benches on a tiny scene with the real encoders, student and harness."""

from __future__ import annotations

from pathlib import Path

import pytest

from shadowtutor_lab.evaluation.encoder_cost import EncoderCostConfig, measure
from shadowtutor_lab.evaluation.key_frame_scale import ScaleStudyConfig, markdown, run_study
from shadowtutor_lab.evaluation.simulated_link import LinkCodecs


def test_the_encoder_bench_times_both_arms_and_encodes_every_stride_th_frame(tiny_scene: Path) -> None:
    result = measure(EncoderCostConfig(tiny_scene, frames=6, stride=3, block=2, backend="torch"))
    assert result["key_frames_encoded"] == 2 and result["encode_ms_median"] > 0
    assert result["fps_without"] > 0 and result["fps_with"] > 0
    assert result["fps_ratio"] == pytest.approx(result["fps_with"] / result["fps_without"])
    with pytest.raises(ValueError, match="at least 1"):
        measure(EncoderCostConfig(tiny_scene, stride=0))


def test_the_scale_study_sends_smaller_key_frames_and_compares_with_h264_offloading(tiny_scene: Path) -> None:
    config = ScaleStudyConfig((tiny_scene,), LinkCodecs("h264", None, "f32", "q8delta+zstd"), scales=(1.0, 0.5),
                              frames=10, backend="torch", threads=1, progress=False)
    results = run_study(config)
    scene = results["scenes"][tiny_scene.name]
    full, half = scene["scales"]
    assert (full["key_frame_size"], half["key_frame_size"]) == ([96, 64], [48, 32])
    assert half["up_bytes_per_key_frame"] < full["up_bytes_per_key_frame"]
    base = scene["h264_offloading"]
    assert full["h264_offloading_ratio"] == pytest.approx(base["bytes_per_frame"] / full["bytes_per_frame"])
    assert full["kbps"] == pytest.approx(8 * full["bytes_per_frame"] * scene["fps"] / 1000)
    assert "| 0.50 | 48x32 |" in markdown(results)
