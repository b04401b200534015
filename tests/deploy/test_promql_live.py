"""Every PromQL expression of the Grafana dashboard and of the alert rules, run by a real
Prometheus (Debian's package) that scrapes a stand-in server exporter and no edge.

The stand-in serves the agreed metric names and types of the server, with the per-edge series of
two edges as their TELEMETRY would make them, with values that move like a running system's (a
second test checks that the real exporters serve the same names and labels); test_live_fleet.py
runs the same checks (prometheus_stack.py) on the real server and edge agent processes.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence

import pytest

from tests.deploy.prometheus_stack import (
    ALERT_RULES,
    EDGE_METRICS,
    SERVER_EDGE_METRICS,
    SERVER_METRICS,
    MetricSpec,
    fleet_scrape_jobs,
    series_names,
    single_value,
    wait_for_fleet_queries,
)

prometheus_client = pytest.importorskip("prometheus_client")
TICK_SECONDS = 0.2
EDGE_IDS = ("edge-a", "edge-b")
LABEL_VALUES = {"mode": ("distill", "naive"), "code": ("bad_frame", "teacher_failed"), "edge_id": EDGE_IDS,
                "agent": ("shadowtutor-edge/1.0",), "version": ("1.0",), "python": ("3.11.2",),
                "output": ("labels", "overlay", "state"), "path": ("segment", "flow"),
                "layer": ("in_conv1", "enc1", "output"), "reason": ("source_full", "evicted"),
                "replica": ("gpu-node-1:4242", "gpu-node-2:4243"), "kind": ("telemetry", "log_line")}
# A label whose values differ by metric: change_based_frames_total's mode is how a frame ran.
METRIC_LABEL_VALUES = {f"{prefix}change_based_frames_total": {"mode": ("change", "full", "fallback")}
                       for prefix in ("shadowtutor_server_edge_", "shadowtutor_edge_")}
# Per tick: what a counter adds, the value a gauge holds (a callable: its value then), what a
# histogram observes. An edge labels 30 frames/s with a key frame every 8th frame; the server sees
# no errors.
EDGE_SAMPLES = {
    "frames_total": 6,
    "key_frames_total": 0.75,
    "sent_bytes_total": 30_000,
    "received_bytes_total": 10_000,
    "waited_seconds_total": 0.01,
    "stride": 8,
    "student_metric": 0.83,
    "weights_version": 5,
    "last_update_timestamp_seconds": time.time,
    "last_report_timestamp_seconds": time.time,
    "inference_seconds": 0.02,
    "blocked_seconds": 0.05,
    "update_roundtrip_seconds": 0.15,
    "connected": 1,
    "sessions_total": 0,
    "updates_applied_total": 0.5,
    "resyncs_total": 0,
    "reconnects_total": 0,
    "info": 1,
    "build_info": 1,
    "key_frames_dropped_total": 0,
    "labels_removed_total": 0,
    "output_dropped_total": 0,
    "change_based_frames_total": 2,  # 6 frames per tick over 3 modes
    "changed_fraction": 0.05,
    "regions_total": 12,  # 4 regions x 6 frames, half on each path
    "region_key_age_frames": 2,
    "cluster_workers": 3,
    "region_queue_depth": 1,
    "key_frames_deferred_total": 0,
    "uplink_budget_bps": 200_000,
    "downlink_budget_bps": 200_000,
}
SAMPLES = {
    **{f"shadowtutor_server_edge_{name}": value for name, value in EDGE_SAMPLES.items()},
    **{f"shadowtutor_edge_{name}": value for name, value in EDGE_SAMPLES.items()},
    "shadowtutor_server_build_info": 1,
    "shadowtutor_server_fleet_edges": 2,
    "shadowtutor_server_fleet_overflow_total": 0,
    "shadowtutor_server_sessions": 2,
    "shadowtutor_server_key_frames_total": 1,
    "shadowtutor_server_teacher_latency_seconds": 0.04,
    "shadowtutor_server_distill_latency_seconds": 0.3,
    "shadowtutor_server_distill_steps_total": 3,
    "shadowtutor_server_received_bytes_total": 60_000,
    "shadowtutor_server_sent_bytes_total": 20_000,
    "shadowtutor_server_errors_total": 0,
    "shadowtutor_server_teacher_ready": 1,
    "shadowtutor_server_teacher_queue_depth": 0,
    "shadowtutor_server_teacher_batch_size": 4,
    "shadowtutor_server_engine_batch_size": 16,
    "shadowtutor_server_engine_batch_limit": 64,
    "shadowtutor_server_engine_batches_running": 1,
    "shadowtutor_server_engine_queue_wait_seconds": 0.02,
    "shadowtutor_server_gpu_busy_ratio": 0.6,
    "shadowtutor_server_gpu_memory_used_bytes": 12 * 2**30,
    "shadowtutor_server_tokens_file_valid": 1,
    # the Ray Serve ingress: 2 replicas of 1 session each, a checkpoint per update
    "shadowtutor_server_teaching_replica_sessions": 1,
    "shadowtutor_server_session_moves_total": 0,
    "shadowtutor_server_teaching_retries_total": 0,
    "shadowtutor_server_checkpoint_seconds": 0.004,
    "shadowtutor_server_checkpoint_bytes": 300_000,
    "shadowtutor_server_checkpoint_age_seconds": 0.5,
    "shadowtutor_server_unauthenticated_connections": 1,
    "shadowtutor_server_connections_refused_total": 0,
    "shadowtutor_server_edge_input_dropped_total": 0,
    # where the server gates an edge's updates: its budget, what it answered, what it held back
    "shadowtutor_server_edge_update_budget_bps": 200_000,
    "shadowtutor_server_edge_answered_bps": 50_000,
    "shadowtutor_server_edge_updates_held_back_total": 0.5,
    "shadowtutor_edge_resumed_reconnects_total": 0,
}
UPDATES = {"counter": "inc", "gauge": "set", "histogram": "observe"}
KINDS = {
    "counter": prometheus_client.Counter,
    "gauge": prometheus_client.Gauge,
    "histogram": prometheus_client.Histogram,
}


class StandInExporter:
    """One registry of the given metrics, served on a loopback port and updated every tick."""

    def __init__(self, specs: Sequence[MetricSpec]) -> None:
        self.registry = prometheus_client.CollectorRegistry()
        self.children = []
        for spec in specs:
            metric = KINDS[spec.kind](spec.name, f"stand-in for {spec.name}", spec.labels, registry=self.registry)
            values = [{**LABEL_VALUES, **METRIC_LABEL_VALUES.get(spec.name, {})}[label] for label in spec.labels]
            children = [metric.labels(*combo) for combo in _product(values)] if spec.labels else [metric]
            self.children += [(spec.kind, child, SAMPLES[spec.name]) for child in children]
        self.tick()
        self._httpd, _ = prometheus_client.start_http_server(0, addr="127.0.0.1", registry=self.registry)
        self._stop = threading.Event()
        self._ticker = threading.Thread(target=self._run, daemon=True)
        self._ticker.start()

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self._httpd.server_port}"

    def tick(self) -> None:
        for kind, child, sample in self.children:
            getattr(child, UPDATES[kind])(sample() if callable(sample) else sample)

    def _run(self) -> None:
        while not self._stop.wait(TICK_SECONDS):
            self.tick()

    def close(self) -> None:
        self._stop.set()
        self._ticker.join()
        self._httpd.shutdown()
        self._httpd.server_close()


def _product(values: list[tuple[str, ...]]) -> list[tuple[str, ...]]:
    combos: list[tuple[str, ...]] = [()]
    for options in values:
        combos = [combo + (option,) for combo in combos for option in options]
    return combos


@pytest.fixture
def stand_in_server() -> Iterator[StandInExporter]:
    server = StandInExporter(SERVER_METRICS + SERVER_EDGE_METRICS)
    yield server
    server.close()


@pytest.mark.slow
def test_every_dashboard_and_rule_expression_evaluates_with_no_edge_scraped(
    start_prometheus, stand_in_server, fleet_dashboard_queries, alert_rule_queries
) -> None:
    prom = start_prometheus(fleet_scrape_jobs(stand_in_server.target, []), rule_files=[ALERT_RULES])
    prom.wait_for_scrapes(4)
    problems = wait_for_fleet_queries(prom, fleet_dashboard_queries, alert_rule_queries)
    assert not problems, "\n".join(problems)

    # FPS is a rate of frame counters: over Grafana's 1m window it reads low while the series are
    # younger than the window, so the panel's expression is checked over a window they fill.
    (fps,) = [q for q in fleet_dashboard_queries if "panel 'Fleet FPS'" in q.origin]
    (sample,) = prom.query(fps.expr.replace("[1m]", "[3s]"))
    assert float(sample["value"][1]) == pytest.approx(60.0, rel=0.15)
    assert single_value(prom, fleet_dashboard_queries, "panel 'Edges connected'") == 2
    assert single_value(prom, fleet_dashboard_queries, "panel 'Fleet key-frame ratio'") == pytest.approx(1 / 8)
    # Rates over 5 minutes start low, so the throughput floor may be pending for a few seconds
    # after an edge appears; on a healthy fleet every alert must clear (none can fire: `for`).
    prom.wait_for(lambda: not prom.api("alerts")["alerts"], 30, "the alerts of a healthy fleet to clear")


def test_stand_ins_serve_the_names_and_labels_of_the_real_exporters() -> None:
    """The real exporters, each with an edge that has every figure (a session, updates, change-based, flow-path
    and cluster frames, a byte budget, a TELEMETRY)."""
    server_metrics = pytest.importorskip("services.server.metrics.server_metrics")
    edge_metrics = pytest.importorskip("edge_agent.metrics")
    from prometheus_client.parser import text_string_to_metric_families

    from shadowtutor.acceleration.regions.labeller import FrameRegions
    from shadowtutor.protocol.telemetry import check_telemetry

    edge = edge_metrics.EdgeMetrics("edge-a")
    edge.weights_installed(1, "update")
    edge.student_scored(0.8)
    edge.frame_done(True, 0.01, 0.02, stride=8)
    edge.on_roundtrip(0.2)
    edge.change_based_frame("change", {"in_conv1": 0.1})
    edge.regions_done(FrameRegions(("flow", "segment"), (1, 0), (0.9, None)))
    edge.cluster_done((2, 0))
    edge.budget_set(200_000, 100_000)
    edge.on_key_frame_deferred()
    server = server_metrics.ServerMetrics()
    server.fleet.session_opened("edge-a", "s1", "distill", "shadowtutor-edge/1.0")
    server.fleet.report("edge-a", check_telemetry(edge.telemetry()))
    server.fleet.updates("edge-a", 100_000.0, 50_000.0, 1)
    from services.ray_serve.metrics import TeachingMetrics  # the Ray Serve ingress adds these to the server's
    from services.ray_serve.requests import Answer
    from shadowtutor.protocol.messages import Error

    TeachingMetrics(server.registry, lambda: {"edge-a"}).record(
        Answer(message=Error(code="internal", message=""), replica="node:1", sessions=1, moved=True,
               checkpoint_seconds=0.01, checkpoint_bytes=9), "edge-a")
    real: dict[str, set[str]] = {}
    for text in (server.exposition().decode(), edge.exposition().decode()):
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                real.setdefault(sample.name, set()).update(set(sample.labels) - {"le"})
    for spec in SERVER_METRICS + SERVER_EDGE_METRICS + EDGE_METRICS:
        for name in series_names([spec]):
            assert real.get(name) == set(spec.labels), f"{name}: the real exporter has labels {real.get(name)}"
    served = {name for name in real if name.startswith("shadowtutor_") and not name.endswith("_created")}
    assert served == series_names(SERVER_METRICS + SERVER_EDGE_METRICS + EDGE_METRICS)
