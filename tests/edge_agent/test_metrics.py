from __future__ import annotations

import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from edge_agent.metrics import EdgeMetrics, FpsMeter
from tests.support.prometheus import promtool_check

EXPECTED_NAMES = {
    "shadowtutor_edge_frames_total",
    "shadowtutor_edge_key_frames_total",
    "shadowtutor_edge_fps",
    "shadowtutor_edge_sent_bytes_total",
    "shadowtutor_edge_received_bytes_total",
    "shadowtutor_edge_stride",
    "shadowtutor_edge_student_metric",
    "shadowtutor_edge_update_roundtrip_seconds",
    "shadowtutor_edge_connected",
    "shadowtutor_edge_updates_applied_total",
    "shadowtutor_edge_resyncs_total",
    "shadowtutor_edge_reconnects_total",
    "shadowtutor_edge_regions_total",
    "shadowtutor_edge_region_key_age_frames",
    "shadowtutor_edge_cluster_workers",
    "shadowtutor_edge_region_queue_depth",
}


def exercised() -> EdgeMetrics:
    metrics = EdgeMetrics("cam-1")
    metrics.on_connected(True)
    metrics.on_bytes(1000, 0)
    metrics.on_bytes(0, 250)
    metrics.on_roundtrip(0.3)
    metrics.on_reconnect()
    metrics.on_resync()
    for i in range(5):
        metrics.frame_done(i == 0, stride=8)
    metrics.updates_applied.inc()
    metrics.student_metric.set(0.83)
    return metrics


def samples(text: str) -> dict[str, float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name.endswith("_created"):
                continue
            assert sample.labels.get("edge_id") == "cam-1", sample
            if "le" not in sample.labels:
                out[sample.name] = sample.value
    return out


def test_exactly_the_agreed_names_all_labelled_edge_id() -> None:
    text = exercised().exposition().decode()
    names = {
        sample.name.removesuffix("_created").removesuffix("_bucket").removesuffix("_count").removesuffix("_sum")
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }
    names = {n if n in EXPECTED_NAMES else n + "_total" for n in names}
    assert names == EXPECTED_NAMES
    values = samples(text)
    assert values["shadowtutor_edge_frames_total"] == 5
    assert values["shadowtutor_edge_key_frames_total"] == 1
    assert values["shadowtutor_edge_sent_bytes_total"] == 1000
    assert values["shadowtutor_edge_received_bytes_total"] == 250
    assert values["shadowtutor_edge_stride"] == 8
    assert values["shadowtutor_edge_student_metric"] == 0.83
    assert values["shadowtutor_edge_connected"] == 1
    assert values["shadowtutor_edge_update_roundtrip_seconds_count"] == 1
    assert values["shadowtutor_edge_fps"] > 0


def test_regions_counted_per_path_with_key_ages() -> None:
    from shadowtutor.acceleration.regions.labeller import FrameRegions

    metrics = EdgeMetrics("cam-1")
    metrics.regions_done(None)  # no flow path: nothing counted
    metrics.regions_done(FrameRegions(("segment",) * 4, (0, 0, 0, 0), (None,) * 4))
    metrics.regions_done(FrameRegions(("flow", "flow", "segment", "flow"), (1, 1, 0, 1), (0.97, 0.96, 0.5, 0.99)))
    families = {f.name: f for f in text_string_to_metric_families(metrics.exposition().decode())}
    by_path = {s.labels["path"]: s.value for s in families["shadowtutor_edge_regions"].samples
               if s.name.endswith("_total")}
    assert by_path == {"segment": 5, "flow": 3}
    ages = {s.name: s.value for s in families["shadowtutor_edge_region_key_age_frames"].samples
            if "le" not in s.labels}
    assert ages["shadowtutor_edge_region_key_age_frames_count"] == 8
    assert ages["shadowtutor_edge_region_key_age_frames_sum"] == 3


def test_cluster_workers_and_queue_depth() -> None:
    metrics = EdgeMetrics("cam-1")
    metrics.cluster_done(None)
    assert samples(metrics.exposition().decode())["shadowtutor_edge_cluster_workers"] == 0
    metrics.cluster_done((3, 1))
    values = samples(metrics.exposition().decode())
    assert values["shadowtutor_edge_cluster_workers"] == 3 and values["shadowtutor_edge_region_queue_depth"] == 1


def test_served_over_http() -> None:
    metrics = exercised()
    port = metrics.serve("127.0.0.1", 0)
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
            body = response.read().decode()
    finally:
        metrics.stop()
    assert samples(body)["shadowtutor_edge_sent_bytes_total"] == 1000


def test_promtool_accepts_the_exposition() -> None:
    promtool_check(exercised().exposition().decode())  # skips where promtool is not installed


def test_fps_is_smoothed() -> None:
    meter = FpsMeter(smoothing=0.5)
    assert meter.tick(0.0) == 0.0
    assert meter.tick(0.1) == pytest.approx(10)
    assert meter.tick(0.3) == pytest.approx(1 / 0.15)
