from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from shadowtutor.algorithms.sparse_options import SparseOptions
from shadowtutor.protocol.defaults import DEFAULT_FRAME_QUALITY
from shadowtutor_lab.evaluation import traffic
from shadowtutor_lab.evaluation.simulated_link import LinkCodecs
from shadowtutor_lab.evaluation.traffic import (
    BASELINE,
    TrafficConfig,
    default_setting,
    label_of,
    parse_setting,
    run_traffic,
    verdict,
)

RAW_720P = 1280 * 720 * 3


def test_settings_are_parsed_as_a_session_would_agree_them() -> None:
    assert parse_setting("jpeg@70/f32") == LinkCodecs("jpeg", 70, "f32")
    assert parse_setting("webp/q8delta+zstd,f16+zstd/held") == LinkCodecs(
        "webp", DEFAULT_FRAME_QUALITY["webp"], "f16+zstd", "q8delta+zstd", train_from_held=True)
    assert parse_setting("raw/f16+zstd,q8delta+zstd") == LinkCodecs("raw", None, "f16+zstd")  # the edge's order
    assert label_of(parse_setting("jpeg@80/q8chdelta+zstd,f32/held")) == (
        "jpeg@80 / q8chdelta+zstd (full: f32), trained from the held weights")
    assert label_of(BASELINE) == "raw / f32"
    assert parse_setting("h264:0.5/f32") == LinkCodecs("h264", None, "f32", key_frame_scale=0.5)
    assert label_of(parse_setting("h264:0.5/f32")) == "h264 at 0.5x / f32"
    sparse = dataclasses.replace(parse_setting("h264/q4sparse+zstd,f16+zstd"),
                                 sparse=SparseOptions(0.05, 3, "gradient"))
    assert label_of(sparse) == "h264 / q4sparse+zstd gradient 0.05 every 3 (full: f16+zstd)"
    residual = dataclasses.replace(sparse, sparse=SparseOptions())
    assert label_of(residual) == "h264 / q4sparse+zstd residual 1 (full: f16+zstd)"


@pytest.mark.parametrize(("spec", "message"), [
    ("jpeg", "FRAME"), ("jpeg/f32/fast", "FRAME"), ("raw@80/f32", "no quality"), ("jpeg@high/f32", "jpeg@high"),
    ("jpeg/q8delta+zstd", "float codec"), ("h264:2/f32", "scale"), ("h264:half/f32", "h264:half"),
    ("gif/f32", "frame codec"), ("jpeg@0/f32", "quality"),
])
def test_bad_settings_are_clear_errors(spec: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_setting(spec)


def test_the_defaults_are_what_a_default_edge_and_server_agree() -> None:
    from edge_agent.settings import EdgeSettings

    edge = EdgeSettings(server="ws://h", source="0")
    link = default_setting()
    # the simulated link streams key frames as the agent does: its first codec, a stream one included
    assert link.frame_codec == edge.frame_codecs[0] and not link.train_from_held
    assert link.key_frame_scale == edge.key_frame_scale
    assert link.frame_quality == DEFAULT_FRAME_QUALITY.get(link.frame_codec)
    assert link.delta_codec in edge.weight_codecs and link.weight_codec in edge.weight_codecs


def test_a_run_compares_every_setting_with_the_uncompressed_one_and_reuses_its_traces(
    tiny_scene: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = TrafficConfig(scenes=(tiny_scene,), out_dir=tmp_path, settings=("jpeg@50/f32",), frames=10,
                           backend="torch", threads=1, progress=False)
    results = run_traffic(config)
    labels = [s["label"] for s in results["settings"]]
    assert labels == [results["baseline"], results["defaults"], "jpeg@50 / f32"] and results["baseline"] == "raw / f32"
    name = tiny_scene.name
    baseline, defaults, jpeg = (s["scenes"][name] for s in results["settings"])
    assert baseline["miou_difference"] == 0.0 and baseline["miou"] == baseline["miou_uncompressed"]
    assert RAW_720P < baseline["frame_bytes_720p"] < RAW_720P + 200  # the KEY_FRAME message of a raw 720p frame
    assert baseline["key_frames"] == 2 and baseline["update_bytes"] > 400_000  # float32 trained part + header
    assert jpeg["frame_bytes_720p"] < baseline["frame_bytes_720p"] / 5
    assert jpeg["update_bytes"] <= jpeg["update_bytes_max"] < 420_000  # float32: at most the whole trained part
    assert defaults["update_bytes"] < baseline["update_bytes"] / 3
    for r in (baseline, defaults, jpeg):
        assert r["key_frame_bytes_720p"] == r["frame_bytes_720p"] + r["update_bytes"]
    assert results["settings"][0]["verdict"]["bytes_met"] is False
    # a second run with the same configuration only reads the stored traces
    monkeypatch.setattr(traffic, "run_passes", lambda *args: pytest.fail("should reuse the traces"))
    again = run_traffic(config)
    assert (again["meta"]["runs"], again["meta"]["runs_reused"], results["meta"]["runs_reused"]) == (3, 3, 0)
    assert [s["scenes"][name]["miou"] for s in again["settings"]] == [baseline["miou"], defaults["miou"], jpeg["miou"]]


def test_the_verdict_says_by_how_much_a_setting_misses() -> None:
    mean = {"largest_key_frame_bytes_720p": 350_000.0, "miou_difference": -1.5, "worst_miou_difference": -3.0,
            "key_frame_bytes_720p": 303_000}
    v = verdict({"mean": mean})
    assert (v["met"], v["bytes_met"], v["miou_met"]) == (False, False, False)
    assert v["bytes_over_target"] == 50_000 and v["miou_points_short"] == pytest.approx(0.5)
    assert v["fraction_of_paper"] == pytest.approx(0.1)
    mean.update(largest_key_frame_bytes_720p=300_000.0, miou_difference=-1.0)  # a worse single scene is no miss
    assert verdict({"mean": mean})["met"]
