"""The server's Prometheus metrics, on a registry owned by one app (never the global one).

The names are a contract with the dashboards and alert rules: change them only together.
Per-edge series (``shadowtutor_server_edge_*``) come from :mod:`services.server.metrics.fleet`.
"""

from __future__ import annotations

import platform
from collections.abc import Iterator

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    Info,
    PlatformCollector,
    ProcessCollector,
    generate_latest,
)
from prometheus_client.metrics_core import Metric

from services.server.metrics.fleet import DEFAULT_MAX_EDGES, DEFAULT_RETENTION, FleetCollector
from shadowtutor.protocol.errors import ErrorCode
from shadowtutor.protocol.messages import SESSION_MODES
from shadowtutor.version import package_version

PREFIX = "shadowtutor_server_"
# why a connection was refused before the upgrade, or closed before its HELLO
# (services.server.access.admission)
REFUSAL_REASONS = ("source_full", "unauthenticated_full", "evicted")
# what admitted edges send that per-session budgets drop
EDGE_INPUT_KINDS = ("telemetry", "log_line")
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
# a batching engine's waits start below 5 ms
QUEUE_WAIT_BUCKETS = (0.001, 0.0025, *LATENCY_BUCKETS)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)


class ServerMetrics:
    """Every series the server exports; label values are created up front so they read 0, not
    absent."""

    def __init__(
        self,
        max_edge_series: int = DEFAULT_MAX_EDGES,
        edge_series_retention: float = DEFAULT_RETENTION,
    ) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        ProcessCollector(registry=self.registry)
        PlatformCollector(registry=self.registry)
        r = self.registry
        self.fleet = FleetCollector(max_edge_series, edge_series_retention)
        r.register(self.fleet)
        Info(f"{PREFIX}build", "The server's package and Python versions", registry=r).info(
            {"version": package_version(), "python": platform.python_version()}
        )
        self.sessions = Gauge(f"{PREFIX}sessions", "Edges connected now", registry=r)
        self.key_frames = Counter(
            f"{PREFIX}key_frames", "Key frames received, by session mode", ["mode"], registry=r
        )
        self.teacher_latency = Histogram(
            f"{PREFIX}teacher_latency_seconds",
            "Time from queueing a key frame for the teacher to its labels (queue wait plus "
            "inference)",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.distill_latency = Histogram(
            f"{PREFIX}distill_latency_seconds",
            "Time of one whole Algorithm 1 run (distillation of one key frame)",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.distill_steps = Counter(
            f"{PREFIX}distill_steps", "Optimisation steps taken by distillation", registry=r
        )
        self.received_bytes = Counter(
            f"{PREFIX}received_bytes", "Bytes of WebSocket messages received from edges", registry=r
        )
        self.sent_bytes = Counter(
            f"{PREFIX}sent_bytes", "Bytes of WebSocket messages sent to edges", registry=r
        )
        self.errors = Counter(
            f"{PREFIX}errors", "ERROR messages sent to edges, by error code", ["code"], registry=r
        )
        self.teacher_ready = Gauge(
            f"{PREFIX}teacher_ready", "1 once the teacher and the student are loaded", registry=r
        )
        self.teacher_queue_depth = Gauge(
            f"{PREFIX}teacher_queue_depth", "Key frames waiting for the teacher", registry=r
        )
        self.engine_batch_size = Histogram(
            f"{PREFIX}engine_batch_size",
            "Key frames per batch of the distillation engine",
            buckets=BATCH_BUCKETS,
            registry=r,
        )
        self.engine_batch_limit = Gauge(
            f"{PREFIX}engine_batch_limit",
            "Most key frames per batch of the distillation engine: --distill-batch-size, halved "
            "each time a batch ran out of device memory",
            registry=r,
        )
        self.engine_batches_running = Gauge(
            f"{PREFIX}engine_batches_running",
            "Batches the distillation engines are training now (at most --distill-engines)",
            registry=r,
        )
        self.engine_queue_wait = Histogram(
            f"{PREFIX}engine_queue_wait_seconds",
            "Time from submitting a key frame to the distillation engine to the start of its batch",
            buckets=QUEUE_WAIT_BUCKETS,
            registry=r,
        )
        self.teacher_batch_size = Histogram(
            f"{PREFIX}teacher_batch_size",
            "Frames per teacher call",
            buckets=BATCH_BUCKETS,
            registry=r,
        )
        self.gpu_busy = Gauge(
            f"{PREFIX}gpu_busy_ratio",
            "Fraction of the last sampling window the server's GPU was busy (NVML utilization); 0 "
            "without one",
            registry=r,
        )
        self.gpu_memory_used = Gauge(
            f"{PREFIX}gpu_memory_used_bytes",
            "GPU memory in use on the server's GPU, all processes (NVML); 0 without one",
            registry=r,
        )
        # -- security: the tokens file and unauthenticated connections (docs/security.md) --------
        self.tokens_file_valid = Gauge(
            f"{PREFIX}tokens_file_valid",
            "1 while the tokens file's last read was accepted (or there is none); 0 while it is "
            "rejected as unreadable or malformed and the last good tokens stay in force",
            registry=r,
        )
        self.tokens_file_valid.set(1)
        self.unauthenticated_connections = Gauge(
            f"{PREFIX}unauthenticated_connections",
            "WebSocket connections on /v1/edge not admitted yet (waiting for or checking their "
            "HELLO)",
            registry=r,
        )
        self.connections_refused = Counter(
            f"{PREFIX}connections_refused",
            "WebSocket connections refused, or closed before their HELLO to make room, by reason",
            ["reason"],
            registry=r,
        )
        self.edge_input_dropped = Counter(
            f"{PREFIX}edge_input_dropped",
            "What admitted edges sent over their per-session budgets and the server dropped: "
            "TELEMETRY reports (unread) and log lines, by kind",
            ["kind"],
            registry=r,
        )
        for reason in REFUSAL_REASONS:
            self.connections_refused.labels(reason=reason)
        for kind in EDGE_INPUT_KINDS:
            self.edge_input_dropped.labels(kind=kind)
        for mode in SESSION_MODES:
            self.key_frames.labels(mode=mode)
        for code in ErrorCode:
            self.errors.labels(code=code.value)

    def exposition(self, edges: bool = True) -> bytes:
        """The text format that ``GET /metrics`` serves; without ``edges``, no series labelled by an
        edge (no edge ids, agents or per-edge figures: what an unauthenticated reader may see)."""
        return generate_latest(self.registry if edges else _WithoutEdges(self.registry))


class _WithoutEdges:
    """A registry's metrics less every family with a sample labelled ``edge_id``."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self._registry = registry

    def collect(self) -> Iterator[Metric]:
        for metric in self._registry.collect():
            if not any("edge_id" in sample.labels for sample in metric.samples):
                yield metric
