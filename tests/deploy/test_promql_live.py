"""Every PromQL expression of the Grafana dashboard and of the alert rules, run by a real
Prometheus (Debian's package) that scrapes stand-in exporters.

The stand-ins serve the agreed metric names and types of the server and of two edge agents with
values that move like a running system's (a second test checks that the real exporters serve the
same names and labels); test_live_fleet.py runs the same checks (prometheus_stack.py) on the real
server and edge agent processes.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence

import pytest

from tests.deploy.prometheus_stack import (
    ALERT_RULES,
    EDGE_METRICS,
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
                "path": ("segment", "flow")}
# Per tick: what a counter adds, the value a gauge holds, what a histogram observes. An edge
# labels 30 frames/s with a key frame every 8th frame; the server sees no errors.
SAMPLES = {
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
    "shadowtutor_edge_frames_total": 6,
    "shadowtutor_edge_key_frames_total": 0.75,
    "shadowtutor_edge_fps": 30.0,
    "shadowtutor_edge_sent_bytes_total": 30_000,
    "shadowtutor_edge_received_bytes_total": 10_000,
    "shadowtutor_edge_stride": 8,
    "shadowtutor_edge_student_metric": 0.83,
    "shadowtutor_edge_update_roundtrip_seconds": 0.15,
    "shadowtutor_edge_connected": 1,
    "shadowtutor_edge_updates_applied_total": 0.5,
    "shadowtutor_edge_regions_total": 12,  # 4 regions x 6 frames, half on each path
    "shadowtutor_edge_region_key_age_frames": 2,
    "shadowtutor_edge_cluster_workers": 3,
    "shadowtutor_edge_region_queue_depth": 1,
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
            values = [LABEL_VALUES[label] for label in spec.labels]
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
            getattr(child, UPDATES[kind])(sample)

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
def stand_ins() -> Iterator[tuple[StandInExporter, StandInExporter]]:
    server, edges = StandInExporter(SERVER_METRICS), StandInExporter(EDGE_METRICS)
    yield server, edges
    server.close()
    edges.close()


def test_every_dashboard_and_rule_expression_evaluates(
    start_prometheus, stand_ins, fleet_dashboard_queries, alert_rule_queries
) -> None:
    server, edges = stand_ins
    prom = start_prometheus(fleet_scrape_jobs(server.target, [edges.target]), rule_files=[ALERT_RULES])
    prom.wait_for_scrapes(4)
    problems = wait_for_fleet_queries(prom, fleet_dashboard_queries, alert_rule_queries)
    assert not problems, "\n".join(problems)

    assert single_value(prom, fleet_dashboard_queries, "panel 'Fleet FPS'") == pytest.approx(60.0)
    assert single_value(prom, fleet_dashboard_queries, "panel 'Edges connected'") == 2
    assert single_value(prom, fleet_dashboard_queries, "panel 'Fleet key-frame ratio'") == pytest.approx(1 / 8)
    # Rates over 5 minutes start low, so the throughput floor may be pending for a few seconds
    # after an edge appears; on a healthy fleet every alert must clear (none can fire: `for`).
    prom.wait_for(lambda: not prom.api("alerts")["alerts"], 30, "the alerts of a healthy fleet to clear")


def test_stand_ins_serve_the_names_and_labels_of_the_real_exporters() -> None:
    server_metrics = pytest.importorskip("services.server.metrics")
    edge_metrics = pytest.importorskip("edge_agent.metrics")
    from prometheus_client.parser import text_string_to_metric_families

    texts = [
        server_metrics.ServerMetrics().exposition().decode(),
        prometheus_client.generate_latest(edge_metrics.EdgeMetrics("edge-a").registry).decode(),
    ]
    real: dict[str, set[str]] = {}
    for text in texts:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                real.setdefault(sample.name, set()).update(set(sample.labels) - {"le"})
    for spec in SERVER_METRICS + EDGE_METRICS:
        for name in series_names([spec]):
            assert real.get(name) == set(spec.labels), f"{name}: the real exporter has labels {real.get(name)}"
