from __future__ import annotations

import time
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from edge_agent.metrics import EdgeMetrics
from shadowtutor.protocol.messages import decode, encode
from shadowtutor.protocol.telemetry import check_telemetry
from tests.support.prometheus import promtool_check

EXPECTED_NAMES = {
    "shadowtutor_edge_build_info",
    "shadowtutor_edge_key_frames_deferred_total",
    "shadowtutor_edge_uplink_budget_bps",
    "shadowtutor_edge_downlink_budget_bps",
    "shadowtutor_edge_frames_total",
    "shadowtutor_edge_key_frames_total",
    "shadowtutor_edge_sent_bytes_total",
    "shadowtutor_edge_received_bytes_total",
    "shadowtutor_edge_waited_seconds_total",
    "shadowtutor_edge_stride",
    "shadowtutor_edge_student_metric",
    "shadowtutor_edge_weights_version",
    "shadowtutor_edge_last_update_timestamp_seconds",
    "shadowtutor_edge_inference_seconds",
    "shadowtutor_edge_blocked_seconds",
    "shadowtutor_edge_update_roundtrip_seconds",
    "shadowtutor_edge_connected",
    "shadowtutor_edge_updates_applied_total",
    "shadowtutor_edge_resyncs_total",
    "shadowtutor_edge_reconnects_total",
    "shadowtutor_edge_resumed_reconnects_total",
    "shadowtutor_edge_key_frames_dropped_total",
    "shadowtutor_edge_output_dropped_total",
    "shadowtutor_edge_labels_removed_total",
    "shadowtutor_edge_regions_total",
    "shadowtutor_edge_region_key_age_frames",
    "shadowtutor_edge_cluster_workers",
    "shadowtutor_edge_region_queue_depth",
    "shadowtutor_edge_acceleration_speedup",
    "shadowtutor_edge_acceleration_stepped_aside",
}


def exercised() -> EdgeMetrics:
    metrics = EdgeMetrics("cam-1")
    metrics.on_connected(True)
    metrics.on_bytes(1000, 0)
    metrics.on_bytes(0, 250)
    metrics.on_roundtrip(0.3)
    metrics.on_reconnect(resumed=False)
    metrics.on_resync()
    metrics.on_key_frame_dropped()
    metrics.output_dropped("labels")
    metrics.labels_removed(3)
    metrics.weights_installed(0, "welcome")
    for i in range(5):
        metrics.frame_done(i == 0, 0.02, 0.5 if i == 3 else None, stride=8)
    metrics.weights_installed(1, "update")
    metrics.student_scored(0.83)
    return metrics


def samples(text: str, edge_only: bool = True) -> dict[str, float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name.endswith("_created") or not sample.name.startswith("shadowtutor_"):
                continue
            assert sample.labels.get("edge_id") == "cam-1", sample
            if "le" not in sample.labels:
                out[sample.name] = sample.value
    return out


def shadowtutor_names(text: str) -> set[str]:
    names = {
        sample.name.removesuffix("_created").removesuffix("_bucket").removesuffix("_count").removesuffix("_sum")
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name.startswith("shadowtutor_")
    }
    return {n if n in EXPECTED_NAMES else n + "_total" for n in names}


def test_exactly_the_agreed_names_all_labelled_edge_id() -> None:
    text = exercised().exposition().decode()
    assert shadowtutor_names(text) == EXPECTED_NAMES
    values = samples(text)
    assert values["shadowtutor_edge_frames_total"] == 5
    assert values["shadowtutor_edge_key_frames_total"] == 1
    assert values["shadowtutor_edge_sent_bytes_total"] == 1000
    assert values["shadowtutor_edge_received_bytes_total"] == 250
    assert values["shadowtutor_edge_stride"] == 8
    assert values["shadowtutor_edge_student_metric"] == 0.83
    assert values["shadowtutor_edge_weights_version"] == 1
    assert values["shadowtutor_edge_updates_applied_total"] == 1  # the WELCOME's weights are no update
    assert abs(values["shadowtutor_edge_last_update_timestamp_seconds"] - time.time()) < 60
    assert values["shadowtutor_edge_connected"] == 1
    assert values["shadowtutor_edge_update_roundtrip_seconds_count"] == 1
    assert values["shadowtutor_edge_inference_seconds_count"] == 5
    assert values["shadowtutor_edge_blocked_seconds_count"] == 1
    assert values["shadowtutor_edge_waited_seconds_total"] == 0.5
    assert values["shadowtutor_edge_build_info"] == 1
    assert "process_cpu_seconds_total" in text  # the process collector


def test_unknown_gauges_are_absent_not_zero() -> None:
    """Before the first update (and in naive mode) there is no student score, stride or weights version."""
    metrics = EdgeMetrics("cam-1")
    metrics.frame_done(True, blocked_seconds=0.1)  # a naive frame
    names = shadowtutor_names(metrics.exposition().decode())
    for absent in ("stride", "student_metric", "weights_version", "last_update_timestamp_seconds"):
        assert f"shadowtutor_edge_{absent}" not in names
    report = metrics.telemetry()
    assert (report.stride, report.student_metric, report.weights_version, report.seconds_since_update) == (
        None, None, None, None)
    assert sum(report.inference_seconds["counts"]) == 0  # no student ran


def test_telemetry_carries_the_exported_figures() -> None:
    metrics = exercised()
    report = check_telemetry(decode(encode(metrics.telemetry())))  # what the server receives, checked
    t = report.telemetry
    assert (t.frames, t.key_frames, t.updates_applied, t.resyncs, t.reconnects) == (5, 1, 1, 1, 1)
    assert (t.bytes_sent, t.bytes_received, t.stride, t.weights_version) == (1000, 250, 8, 1)
    assert t.student_metric == 0.83 and t.waited_seconds == 0.5
    assert 0 <= t.seconds_since_update < 60
    inference = report.histograms["inference_seconds"]
    assert inference.count == 5 and inference.sum == pytest.approx(0.1)
    assert inference.cumulative()[-1] == (float("inf"), 5)
    assert report.histograms["blocked_seconds"].count == 1
    assert report.histograms["roundtrip_seconds"].count == 1
    assert (t.key_frames_dropped, t.labels_removed) == (1, 3)
    assert t.output_dropped == {"labels": 1, "overlay": 0, "state": 0}
    assert (t.change_based_frames, t.regions, t.cluster_workers) == (None, None, None)  # features off


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
    report = check_telemetry(metrics.telemetry())
    assert report.telemetry.regions == {"segment": 5, "flow": 3}
    assert report.histograms["region_key_age_frames"].count == 8


def test_cluster_workers_and_queue_depth() -> None:
    metrics = EdgeMetrics("cam-1")
    metrics.cluster_done(None)
    assert samples(metrics.exposition().decode())["shadowtutor_edge_cluster_workers"] == 0
    assert metrics.telemetry().cluster_workers is None  # no cluster: not reported (the exporter's 0 aside)
    metrics.cluster_done((3, 1))
    values = samples(metrics.exposition().decode())
    assert values["shadowtutor_edge_cluster_workers"] == 3 and values["shadowtutor_edge_region_queue_depth"] == 1
    report = check_telemetry(metrics.telemetry()).telemetry
    assert (report.cluster_workers, report.region_queue_depth) == (3, 1)


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


def test_change_based_frames_and_changed_fraction_per_layer() -> None:
    metrics = EdgeMetrics("cam-1")
    metrics.change_based_frame("full", {"in_conv1": 1.0, "out_conv1": 1.0})
    metrics.change_based_frame("change", {"in_conv1": 0.02, "out_conv1": 0.1})
    metrics.change_based_frame("fallback", {})
    text = metrics.exposition().decode()
    series = {(s.name, tuple(sorted((k, v) for k, v in s.labels.items() if k != "edge_id"))): s.value
              for family in text_string_to_metric_families(text) for s in family.samples
              if not s.name.endswith("_created")}
    assert series[("shadowtutor_edge_change_based_frames_total", (("mode", "change"),))] == 1
    assert series[("shadowtutor_edge_change_based_frames_total", (("mode", "fallback"),))] == 1
    assert series[("shadowtutor_edge_changed_fraction", (("layer", "in_conv1"),))] == 0.02
    assert series[("shadowtutor_edge_changed_fraction", (("layer", "out_conv1"),))] == 0.1
    report = check_telemetry(metrics.telemetry()).telemetry
    assert report.change_based_frames == {"change": 1, "full": 1, "fallback": 1}
    assert report.changed_fraction == {"in_conv1": 0.02, "out_conv1": 0.1}


def test_a_resumed_reconnect_counts_as_a_reconnect_and_as_resumed() -> None:
    metrics = EdgeMetrics("cam-1")
    metrics.on_reconnect(resumed=True)
    metrics.on_reconnect(resumed=False)
    values = {s.name: s.value for f in text_string_to_metric_families(metrics.exposition().decode()) for s in f.samples}
    assert values["shadowtutor_edge_reconnects_total"] == 2
    assert values["shadowtutor_edge_resumed_reconnects_total"] == 1
    assert metrics.telemetry().reconnects == 2


def test_a_held_back_answer_moves_the_version_but_is_no_update() -> None:
    metrics = EdgeMetrics("cam-1")
    metrics.weights_installed(0, "welcome")
    metrics.weights_installed(1, "update")
    metrics.weights_installed(2, "held_back")
    values = samples(metrics.exposition().decode())
    assert values["shadowtutor_edge_weights_version"] == 2
    assert values["shadowtutor_edge_updates_applied_total"] == 1
