"""The agreed metric names, per-app registries, and the exposition passing promtool."""

from __future__ import annotations

from services.server.metrics.server_metrics import ServerMetrics
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
    "shadowtutor_server_engine_batch_size": "histogram",
    "shadowtutor_server_engine_queue_wait_seconds": "histogram",
    "shadowtutor_server_teacher_batch_size": "histogram",
    "shadowtutor_server_gpu_busy_ratio": "gauge",
    "shadowtutor_server_gpu_memory_used_bytes": "gauge",
}
BATCH_BOUNDS = [1, 2, 4, 8, 16, 32, 64, 128, 256, float("inf")]


def test_agreed_names_and_types() -> None:
    families = {m.name: m.type for m in ServerMetrics().registry.collect()}
    for name, kind in AGREED.items():
        assert families.get(name) == kind, name


def test_label_values_exist_from_the_start() -> None:
    text = ServerMetrics().exposition().decode()
    assert sample_value(text, "shadowtutor_server_key_frames_total", mode="distill") == 0
    assert sample_value(text, "shadowtutor_server_key_frames_total", mode="naive") == 0
    assert sample_value(text, "shadowtutor_server_errors_total", code="server_busy") == 0


def test_batch_and_queue_wait_histograms_have_the_agreed_buckets() -> None:
    metrics = ServerMetrics()
    metrics.engine_batch_size.observe(3)
    metrics.teacher_batch_size.observe(8)
    metrics.engine_queue_wait.observe(0.0015)
    bounds = {}
    for family in metrics.registry.collect():
        bounds[family.name] = [float(s.labels["le"]) for s in family.samples if s.name.endswith("_bucket")]
    assert bounds["shadowtutor_server_engine_batch_size"] == BATCH_BOUNDS
    assert bounds["shadowtutor_server_teacher_batch_size"] == BATCH_BOUNDS
    waits = bounds["shadowtutor_server_engine_queue_wait_seconds"]
    assert waits[:3] == [0.001, 0.0025, 0.005] and waits[-2:] == [60.0, float("inf")] and waits == sorted(waits)
    text = metrics.exposition().decode()
    assert sample_value(text, "shadowtutor_server_engine_batch_size_bucket", le="2.0") == 0
    assert sample_value(text, "shadowtutor_server_engine_batch_size_bucket", le="4.0") == 1
    assert sample_value(text, "shadowtutor_server_teacher_batch_size_bucket", le="8.0") == 1
    assert sample_value(text, "shadowtutor_server_engine_queue_wait_seconds_bucket", le="0.001") == 0
    assert sample_value(text, "shadowtutor_server_engine_queue_wait_seconds_bucket", le="0.0025") == 1


def test_gpu_gauges_read_0_until_a_gpu_is_sampled() -> None:
    metrics = ServerMetrics()
    text = metrics.exposition().decode()
    assert sample_value(text, "shadowtutor_server_gpu_busy_ratio") == 0
    assert sample_value(text, "shadowtutor_server_gpu_memory_used_bytes") == 0


def test_each_instance_has_its_own_registry() -> None:
    first, second = ServerMetrics(), ServerMetrics()
    first.received_bytes.inc(10)
    assert sample_value(first.exposition().decode(), "shadowtutor_server_received_bytes_total") == 10
    assert sample_value(second.exposition().decode(), "shadowtutor_server_received_bytes_total") == 0


def test_promtool_accepts_the_exposition() -> None:
    metrics = ServerMetrics()
    metrics.teacher_latency.observe(0.2)
    metrics.engine_batch_size.observe(16)
    metrics.engine_queue_wait.observe(0.002)
    metrics.gpu_busy.set(0.4)
    metrics.errors.labels(code="bad_frame").inc()
    promtool_check(metrics.exposition().decode())
