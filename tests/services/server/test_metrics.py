"""The agreed metric names, per-app registries, and the exposition passing promtool."""

from __future__ import annotations

from services.server.metrics import ServerMetrics
from tests.support.prometheus import promtool_check, sample_value

AGREED = {
    "shadowtutor_server_sessions": "gauge",
    "shadowtutor_server_key_frames": "counter",
    "shadowtutor_server_teacher_latency_seconds": "histogram",
    "shadowtutor_server_distill_latency_seconds": "histogram",
    "shadowtutor_server_distill_steps": "counter",
    "shadowtutor_server_received_bytes": "counter",
    "shadowtutor_server_sent_bytes": "counter",
    "shadowtutor_server_errors": "counter",
    "shadowtutor_server_teacher_ready": "gauge",
    "shadowtutor_server_teacher_queue_depth": "gauge",
}


def test_agreed_names_and_types() -> None:
    families = {m.name: m.type for m in ServerMetrics().registry.collect()}
    for name, kind in AGREED.items():
        assert families.get(name) == kind, name


def test_label_values_exist_from_the_start() -> None:
    text = ServerMetrics().exposition().decode()
    assert sample_value(text, "shadowtutor_server_key_frames_total", mode="distill") == 0
    assert sample_value(text, "shadowtutor_server_key_frames_total", mode="naive") == 0
    assert sample_value(text, "shadowtutor_server_errors_total", code="server_busy") == 0


def test_each_instance_has_its_own_registry() -> None:
    first, second = ServerMetrics(), ServerMetrics()
    first.received_bytes.inc(10)
    assert sample_value(first.exposition().decode(), "shadowtutor_server_received_bytes_total") == 10
    assert sample_value(second.exposition().decode(), "shadowtutor_server_received_bytes_total") == 0


def test_promtool_accepts_the_exposition() -> None:
    metrics = ServerMetrics()
    metrics.teacher_latency.observe(0.2)
    metrics.errors.labels(code="bad_frame").inc()
    promtool_check(metrics.exposition().decode())
