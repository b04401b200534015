"""Per-edge series from TELEMETRY: values, absent gauges, the cap on edges, retention after a session."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from services.server.metrics.fleet import FleetCollector
from shadowtutor.protocol.messages import Telemetry
from shadowtutor.protocol.telemetry import (
    HISTOGRAMS,
    LABELS,
    MAX_BUCKETS,
    OPTIONAL_COUNTS,
    STUDENT_LAYERS,
    EdgeReport,
    check_telemetry,
)
from tests.support.prometheus import promtool_check, sample_value


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def report(frames: int = 10, **fields) -> EdgeReport:
    values = dict(frames=frames, key_frames=2, updates_applied=1, resyncs=0, reconnects=0, bytes_sent=500,
                  bytes_received=900, waited_seconds=0.25)
    return check_telemetry(Telemetry(**{**values, **fields}))


def exposition(fleet: FleetCollector) -> str:
    registry = CollectorRegistry()
    registry.register(fleet)
    return generate_latest(registry).decode()


def edges_in(text: str) -> set[str]:
    from prometheus_client.parser import text_string_to_metric_families

    return {s.labels["edge_id"] for f in text_string_to_metric_families(text) for s in f.samples
            if f.name == "shadowtutor_server_edge_connected"}


def test_a_report_becomes_the_edges_series() -> None:
    clock, wall = Clock(), Clock()
    fleet = FleetCollector(clock=clock, wall_clock=wall)
    fleet.session_opened("cam-1", "s1", "distill", "shadowtutor-edge/1.0")
    histogram = {"buckets": [0.01, 0.1], "counts": [3, 6, 1], "sum": 0.5}
    fleet.report("cam-1", report(stride=16, student_metric=0.75, weights_version=4, seconds_since_update=3.0,
                                 inference_seconds=histogram))
    text = exposition(fleet)
    edge = {"edge_id": "cam-1"}
    assert sample_value(text, "shadowtutor_server_edge_connected", **edge) == 1
    assert sample_value(text, "shadowtutor_server_edge_frames_total", **edge) == 10
    assert sample_value(text, "shadowtutor_server_edge_sent_bytes_total", **edge) == 500
    assert sample_value(text, "shadowtutor_server_edge_waited_seconds_total", **edge) == 0.25
    assert sample_value(text, "shadowtutor_server_edge_stride", **edge) == 16
    assert sample_value(text, "shadowtutor_server_edge_student_metric", **edge) == 0.75
    assert sample_value(text, "shadowtutor_server_edge_weights_version", **edge) == 4
    assert sample_value(text, "shadowtutor_server_edge_last_update_timestamp_seconds", **edge) == wall.now - 3.0
    assert sample_value(text, "shadowtutor_server_edge_inference_seconds_bucket", **edge, le="0.1") == 9
    assert sample_value(text, "shadowtutor_server_edge_inference_seconds_bucket", **edge, le="+Inf") == 10
    assert sample_value(text, "shadowtutor_server_edge_inference_seconds_sum", **edge) == 0.5
    assert sample_value(text, "shadowtutor_server_edge_info", **edge, mode="distill",
                        agent="shadowtutor-edge/1.0") == 1
    promtool_check(text)


def test_unknown_figures_are_absent_not_zero() -> None:
    """A naive edge, or one before its first update: no student score, stride or version series."""
    fleet = FleetCollector()
    fleet.session_opened("naive-1", "s1", "naive", "")
    fleet.report("naive-1", report())
    text = exposition(fleet)
    assert sample_value(text, "shadowtutor_server_edge_frames_total", edge_id="naive-1") == 10
    for name in ("student_metric", "stride", "weights_version", "last_update_timestamp_seconds"):
        with pytest.raises(KeyError):
            sample_value(text, f"shadowtutor_server_edge_{name}", edge_id="naive-1")


def test_the_acceleration_and_field_figures_become_labelled_series() -> None:
    fleet = FleetCollector()
    fleet.session_opened("cam-2", "s1", "distill", "")
    fleet.report("cam-2", report(
        key_frames_dropped=5, output_dropped={"labels": 2, "state": 1}, labels_removed=40,
        change_based_frames={"change": 7, "full": 2, "fallback": 1}, changed_fraction={"in_conv1": 0.02, "output": 0},
        regions={"segment": 4, "flow": 12}, region_key_age_frames={"buckets": [0, 1], "counts": [4, 12, 0], "sum": 12},
        cluster_workers=3, region_queue_depth=1, key_frames_deferred=9, uplink_budget_bps=200_000))
    text = exposition(fleet)
    edge = {"edge_id": "cam-2"}
    assert sample_value(text, "shadowtutor_server_edge_key_frames_dropped_total", **edge) == 5
    assert sample_value(text, "shadowtutor_server_edge_labels_removed_total", **edge) == 40
    assert sample_value(text, "shadowtutor_server_edge_output_dropped_total", **edge, output="labels") == 2
    assert sample_value(text, "shadowtutor_server_edge_output_dropped_total", **edge, output="state") == 1
    with pytest.raises(KeyError):  # not reported: absent
        sample_value(text, "shadowtutor_server_edge_output_dropped_total", **edge, output="overlay")
    assert sample_value(text, "shadowtutor_server_edge_change_based_frames_total", **edge, mode="change") == 7
    assert sample_value(text, "shadowtutor_server_edge_change_based_frames_total", **edge, mode="fallback") == 1
    assert sample_value(text, "shadowtutor_server_edge_changed_fraction", **edge, layer="in_conv1") == 0.02
    assert sample_value(text, "shadowtutor_server_edge_changed_fraction", **edge, layer="output") == 0
    assert sample_value(text, "shadowtutor_server_edge_regions_total", **edge, path="flow") == 12
    assert sample_value(text, "shadowtutor_server_edge_region_key_age_frames_bucket", **edge, le="1.0") == 16
    assert sample_value(text, "shadowtutor_server_edge_region_key_age_frames_sum", **edge) == 12
    assert sample_value(text, "shadowtutor_server_edge_cluster_workers", **edge) == 3
    assert sample_value(text, "shadowtutor_server_edge_region_queue_depth", **edge) == 1
    assert sample_value(text, "shadowtutor_server_edge_key_frames_deferred_total", **edge) == 9
    assert sample_value(text, "shadowtutor_server_edge_uplink_budget_bps", **edge) == 200_000
    assert "shadowtutor_server_edge_downlink_budget_bps{" not in text
    promtool_check(text)


def test_one_edge_adds_at_most_195_series() -> None:
    """docs/deploy/metrics.md, Fleet metrics: the bound per edge when every figure is at its largest."""
    fleet = FleetCollector()
    fleet.session_opened("big", "s1", "distill", "")
    histogram = {"buckets": list(range(1, MAX_BUCKETS + 1)), "counts": [1] * (MAX_BUCKETS + 1), "sum": 1.0}
    fleet.report("big", report(
        stride=8, student_metric=0.5, weights_version=1, seconds_since_update=1.0,
        **{name: histogram for name in HISTOGRAMS}, **{name: 1 for name in OPTIONAL_COUNTS},
        **{name: dict.fromkeys(keys, 1) for name, keys in LABELS.items()},
        changed_fraction=dict.fromkeys(STUDENT_LAYERS, 0.5)))
    fleet.updates("big", 100_000.0, 50_000.0, 3)
    lines = [line for line in exposition(fleet).splitlines() if line.startswith("shadowtutor_server_edge_")]
    assert len(lines) == 198  # the change-based layers of today and the two retired ones (older edges)


def test_the_servers_update_gate_becomes_the_edges_series() -> None:
    fleet = FleetCollector()
    fleet.session_opened("cam", "s1", "distill", "")
    text = exposition(fleet)
    with pytest.raises(KeyError):
        sample_value(text, "shadowtutor_server_edge_answered_bps", edge_id="cam")
    fleet.updates("cam", None, 12_000.0, 2)
    text = exposition(fleet)
    assert sample_value(text, "shadowtutor_server_edge_answered_bps", edge_id="cam") == 12_000.0
    assert sample_value(text, "shadowtutor_server_edge_updates_held_back_total", edge_id="cam") == 2
    with pytest.raises(KeyError):
        sample_value(text, "shadowtutor_server_edge_update_budget_bps", edge_id="cam")
    fleet.updates("cam", 80_000.0, 9_000.0, 5)
    assert sample_value(exposition(fleet), "shadowtutor_server_edge_update_budget_bps", edge_id="cam") == 80_000.0
    fleet.updates("other", 1.0, 1.0, 1)  # an edge without a session gets no series
    assert "other" not in exposition(fleet)


def test_figures_of_features_that_are_off_are_absent() -> None:
    """An edge without change-based inference, flow path or cluster, or one that predates the fields."""
    fleet = FleetCollector()
    fleet.session_opened("plain", "s1", "distill", "")
    fleet.report("plain", report())
    text = exposition(fleet)
    for name in ("key_frames_dropped_total", "labels_removed_total", "change_based_frames_total",
                 "changed_fraction", "regions_total", "region_key_age_frames_count", "cluster_workers",
                 "region_queue_depth", "key_frames_deferred_total", "uplink_budget_bps", "downlink_budget_bps"):
        assert f"shadowtutor_server_edge_{name}{{" not in text, name
    promtool_check(text)


def test_an_ended_session_keeps_its_series_for_the_retention_then_loses_them() -> None:
    clock = Clock()
    fleet = FleetCollector(retention=60, clock=clock)
    fleet.session_opened("cam-1", "s1", "distill", "")
    fleet.report("cam-1", report())
    fleet.session_ended("cam-1", "s1")
    clock.now += 59
    assert sample_value(exposition(fleet), "shadowtutor_server_edge_connected", edge_id="cam-1") == 0
    clock.now += 2
    assert edges_in(exposition(fleet)) == set()


def test_a_replaced_session_ending_late_leaves_the_new_one_connected() -> None:
    fleet = FleetCollector()
    fleet.session_opened("cam-1", "old", "distill", "")
    fleet.session_opened("cam-1", "new", "distill", "")
    fleet.session_ended("cam-1", "old")
    text = exposition(fleet)
    assert sample_value(text, "shadowtutor_server_edge_connected", edge_id="cam-1") == 1
    assert sample_value(text, "shadowtutor_server_edge_sessions_total", edge_id="cam-1") == 2


def test_the_cap_on_edges_with_series() -> None:
    """At most max_edges edges: an ended edge gives up its slot (the longest ended first); while every slot
    is held by a connected edge, a newcomer gets none and is counted, and gets its series once one frees."""
    clock = Clock()
    fleet = FleetCollector(max_edges=2, clock=clock)
    for edge in ("a", "b"):
        fleet.session_opened(edge, edge, "distill", "")
    fleet.session_opened("c", "c", "distill", "")
    fleet.report("c", report())
    text = exposition(fleet)
    assert edges_in(text) == {"a", "b"}
    assert sample_value(text, "shadowtutor_server_fleet_overflow_total") == 2  # c's session and report
    assert sample_value(text, "shadowtutor_server_fleet_edges") == 2
    fleet.session_ended("a", "a")
    clock.now += 1
    fleet.session_ended("b", "b")
    fleet.report("c", report(frames=20))  # a's slot (ended first) goes to c
    text = exposition(fleet)
    assert edges_in(text) == {"b", "c"}
    assert sample_value(text, "shadowtutor_server_edge_frames_total", edge_id="c") == 20
    assert sample_value(text, "shadowtutor_server_fleet_overflow_total") == 2
    fleet.session_ended("c", "c")
    fleet.report("c", report())  # after its session: nothing to attach it to, no new slot
    assert sample_value(exposition(fleet), "shadowtutor_server_fleet_edges") == 2
