"""The edge's figures: a Prometheus exporter (pull, default port 9108) and the TELEMETRY report
(push).

Every ``shadowtutor_edge_*`` series is labelled ``edge_id``; the registry also carries the process
collector (CPU, memory, file descriptors) and ``shadowtutor_edge_build_info``. The same figures go
to the server in TELEMETRY (:meth:`EdgeMetrics.telemetry`), which exports them per edge as
``shadowtutor_server_edge_*``: the dashboards need no edge scraped. Gauges that are not known yet
(the student's metric before the first update, stride and weights in naive mode) are absent, not 0.
The metric names are a contract with the dashboards and alert rules in ``dashboards/``.
"""

from __future__ import annotations

import platform
import threading
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    Info,
    PlatformCollector,
    ProcessCollector,
    generate_latest,
    start_http_server,
)
from prometheus_client.metrics import MetricWrapperBase

from shadowtutor.protocol.messages import Telemetry
from shadowtutor.protocol.telemetry import CHANGE_MODES, OUTPUTS, REGION_PATHS, HistogramSnapshot
from shadowtutor.version import package_version

if TYPE_CHECKING:
    from wsgiref.simple_server import WSGIServer

    from shadowtutor.acceleration.labellers.base import Trial
    from shadowtutor.acceleration.regions.labeller import FrameRegions

_Metric = TypeVar("_Metric", bound=MetricWrapperBase)
ROUNDTRIP_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
# Student inference per frame: the paper's Jetson figure is 0.143 s; a desktop CPU takes ~0.01 s.
INFERENCE_BUCKETS = (0.002, 0.005, 0.01, 0.02, 0.035, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 1.0)
# Waits at MIN_STRIDE, one per key frame: mostly 0 (the update came in time), else up to a round
# trip.
BLOCKED_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
KEY_AGE_BUCKETS = (0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32)


class EdgeMetrics:
    """The edge's series in their own registry; also the transport's observer."""

    def __init__(self, edge_id: str, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        self.edge_id = edge_id
        self._server: WSGIServer | None = None
        # monotonic time the weights last changed
        self._last_install: float | None = None
        self._lock = threading.Lock()
        # a frame went through the flow path: its figures are reported
        self._flow_path = False
        # likewise the edge cluster
        self._cluster = False
        r = self.registry
        ProcessCollector(registry=r)
        PlatformCollector(registry=r)
        Info(
            "shadowtutor_edge_build",
            "The agent's package and Python versions",
            ["edge_id"],
            registry=r,
        ).labels(edge_id=edge_id).info(
            {"version": package_version(), "python": platform.python_version()}
        )

        def parent(kind: type[_Metric], name: str, doc: str, **kwargs: Any) -> _Metric:
            return kind(name, doc, ["edge_id"], registry=r, **kwargs)

        def make(kind: type[_Metric], name: str, doc: str, **kwargs: Any) -> _Metric:
            return parent(kind, name, doc, **kwargs).labels(edge_id=edge_id)

        self.frames = make(
            Counter, "shadowtutor_edge_frames_total", "Frames labelled by the edge (rate(): FPS)"
        )
        self.key_frames = make(
            Counter, "shadowtutor_edge_key_frames_total", "Key frames sent to the server"
        )
        self.sent_bytes = make(
            Counter, "shadowtutor_edge_sent_bytes_total", "Bytes of WebSocket messages sent"
        )
        self.received_bytes = make(
            Counter, "shadowtutor_edge_received_bytes_total", "Bytes of WebSocket messages received"
        )
        self.waited = make(
            Counter,
            "shadowtutor_edge_waited_seconds_total",
            "Seconds inference waited for the server",
        )
        # absent until known:
        self.stride = parent(
            Gauge, "shadowtutor_edge_stride", "Frames between key frames now in force"
        )
        self.student_metric = parent(
            Gauge,
            "shadowtutor_edge_student_metric",
            "The student's metric (mIoU 0..1) in the last applied update",
        )
        self.weights_version = parent(
            Gauge,
            "shadowtutor_edge_weights_version",
            "Version of the weights held (in the current session)",
        )
        self.last_update = parent(
            Gauge,
            "shadowtutor_edge_last_update_timestamp_seconds",
            "Unix time the weights last changed",
        )
        self.inference = make(
            Histogram,
            "shadowtutor_edge_inference_seconds",
            "Student inference time per frame (T_SI)",
            buckets=INFERENCE_BUCKETS,
        )
        self.blocked = make(
            Histogram,
            "shadowtutor_edge_blocked_seconds",
            "Time waited at MIN_STRIDE for each key frame's update, 0 when in time (naive: each "
            "frame's labels)",
            buckets=BLOCKED_BUCKETS,
        )
        self.roundtrip = make(
            Histogram,
            "shadowtutor_edge_update_roundtrip_seconds",
            "Time from sending a key frame to receiving its update",
            buckets=ROUNDTRIP_BUCKETS,
        )
        self.connected = make(
            Gauge, "shadowtutor_edge_connected", "1 while a session with the server is open"
        )
        self.updates_applied = make(
            Counter,
            "shadowtutor_edge_updates_applied_total",
            "Weight updates installed (WELCOME weights excluded)",
        )
        self.resyncs = make(
            Counter, "shadowtutor_edge_resyncs_total", "Full-weight resyncs requested"
        )
        self.reconnects = make(
            Counter,
            "shadowtutor_edge_reconnects_total",
            "Handshakes after the first session's: resumed sessions and new ones",
        )
        self.resumed_reconnects = make(
            Counter,
            "shadowtutor_edge_resumed_reconnects_total",
            "Reconnects that resumed the session the edge held (no weights downloaded)",
        )
        self.key_frames_dropped = make(
            Counter,
            "shadowtutor_edge_key_frames_dropped_total",
            "Key frames not sent because no session was open (offline: labelled, not queued)",
        )
        # The byte budget (--uplink-budget, --downlink-budget): absent until one is set.
        self._budget: tuple[float | None, float | None] | None = None
        self.key_frames_deferred = make(
            Counter,
            "shadowtutor_edge_key_frames_deferred_total",
            "Frames at which the byte budget held back the key frame the stride asked for",
        )
        self.uplink_budget = make(
            Gauge, "shadowtutor_edge_uplink_budget_bps", "Uplink budget, bits per second (0: none)"
        )
        self.downlink_budget = make(
            Gauge,
            "shadowtutor_edge_downlink_budget_bps",
            "Downlink budget, bits per second (0: none)",
        )
        self._outputs_dropped = Counter(
            "shadowtutor_edge_output_dropped_total",
            "Writes an output dropped because it failed (disk full, I/O error); inference went on",
            ["edge_id", "output"],
            registry=self.registry,
        )
        # present at 0 before the first failure
        for output in OUTPUTS:
            self._outputs_dropped.labels(edge_id=edge_id, output=output)
        self.labels_removed_total = make(
            Counter,
            "shadowtutor_edge_labels_removed_total",
            "Label-map files removed by retention (oldest first)",
        )
        self.change_based_frames = Counter(
            "shadowtutor_edge_change_based_frames_total",
            "Frames of the change-based student by how they ran: change (change-based), full (full "
            "evaluation through the caches), fallback (the full-frame backend)",
            ["edge_id", "mode"],
            registry=self.registry,
        )
        self.changed_fraction = Gauge(
            "shadowtutor_edge_changed_fraction",
            "Fraction of each layer's input positions that changed in the last frame run "
            "change-based",
            ["edge_id", "layer"],
            registry=self.registry,
        )
        # The flow path (--flow-path): regions per path, and the age of the keys they were warped
        # from.
        regions = Counter(
            "shadowtutor_edge_regions_total",
            "Frame regions labelled, by path: segment (the student) or flow (warped from the "
            "region's key)",
            ["edge_id", "path"],
            registry=self.registry,
        )
        self.regions = {path: regions.labels(edge_id=edge_id, path=path) for path in REGION_PATHS}
        self.region_key_age = make(
            Histogram,
            "shadowtutor_edge_region_key_age_frames",
            "Frames since each region's key was segmented, after each frame (0: segmented now)",
            buckets=KEY_AGE_BUCKETS,
        )
        # The edge cluster (--cluster): its live workers and the regions left waiting for an idle
        # one.
        self.cluster_workers = make(
            Gauge, "shadowtutor_edge_cluster_workers", "Live workers of the edge cluster"
        )
        self.region_queue_depth = make(
            Gauge,
            "shadowtutor_edge_region_queue_depth",
            "Regions waiting for an idle cluster worker, last frame",
        )
        # An acceleration's trial against the plain student (set once, when it ends).
        self.acceleration_speedup = make(
            Gauge,
            "shadowtutor_edge_acceleration_speedup",
            "The acceleration's speed over its trial frames, as a multiple of the plain student's "
            "(default backend)",
        )
        self.acceleration_stepped_aside = make(
            Gauge,
            "shadowtutor_edge_acceleration_stepped_aside",
            "1 when the acceleration was measured slower than the plain student and stepped aside, "
            "else 0",
        )

    # -- per frame, from the agent ---------------------------------------------------------

    def frame_done(
        self,
        is_key_frame: bool,
        inference_seconds: float | None = None,
        blocked_seconds: float | None = None,
        stride: int | None = None,
    ) -> None:
        """One frame done: its student inference time (None: no student, naive mode) and how long it
        waited for the server, if it had to."""
        self.frames.inc()
        if is_key_frame:
            self.key_frames.inc()
        if inference_seconds is not None:
            self.inference.observe(inference_seconds)
        if blocked_seconds is not None:
            self.blocked.observe(blocked_seconds)
            self.waited.inc(blocked_seconds)
        if stride is not None:
            self.stride.labels(edge_id=self.edge_id).set(stride)

    def weights_installed(self, version: int, origin: str) -> None:
        """The student now holds ``version``, installed from ``origin`` (``welcome``: a session's
        first weights, not an update; ``held_back``: a new version without new weights, counted as
        neither an update nor an install)."""
        self.weights_version.labels(edge_id=self.edge_id).set(version)
        if origin == "held_back":
            return
        with self._lock:
            self._last_install = time.monotonic()
        self.last_update.labels(edge_id=self.edge_id).set_to_current_time()
        if origin != "welcome":
            self.updates_applied.inc()

    def student_scored(self, metric: float) -> None:
        """The metric of the update just applied: the student's score on its key frame."""
        self.student_metric.labels(edge_id=self.edge_id).set(metric)

    # -- OutputObserver (writer thread) ------------------------------------------------------

    def output_dropped(self, output: str) -> None:
        self._outputs_dropped.labels(edge_id=self.edge_id, output=output).inc()

    def labels_removed(self, count: int) -> None:
        self.labels_removed_total.inc(count)

    def change_based_frame(self, mode: str, changed: Mapping[str, float]) -> None:
        """One frame of the change-based student; ``changed``: per layer (a fixed set of names)."""
        self.change_based_frames.labels(edge_id=self.edge_id, mode=mode).inc()
        for layer, fraction in changed.items():
            self.changed_fraction.labels(edge_id=self.edge_id, layer=layer).set(fraction)

    def regions_done(self, frame: FrameRegions | None) -> None:
        """Count one frame's regions by path (nothing without the flow path)."""
        if frame is None:
            return
        self._flow_path = True
        for path, age in zip(frame.paths, frame.key_ages, strict=True):
            self.regions[path].inc()
            self.region_key_age.observe(age)

    def cluster_done(self, state: tuple[int, int] | None) -> None:
        """Record the cluster's live workers and queue depth (nothing without a cluster)."""
        if state is not None:
            self._cluster = True
            self.cluster_workers.set(state[0])
            self.region_queue_depth.set(state[1])

    def acceleration_trial(self, trial: Trial | None) -> None:
        """Record the acceleration's trial once it is decided (nothing before, or without an
        acceleration)."""
        if trial is not None:
            self.acceleration_speedup.set(trial.speedup)
            self.acceleration_stepped_aside.set(1 if trial.stepped_aside else 0)

    # -- TransportObserver -------------------------------------------------------------------

    def on_connected(self, connected: bool) -> None:
        self.connected.set(1 if connected else 0)

    def on_bytes(self, sent: int, received: int) -> None:
        if sent:
            self.sent_bytes.inc(sent)
        if received:
            self.received_bytes.inc(received)

    def on_roundtrip(self, seconds: float) -> None:
        self.roundtrip.observe(seconds)

    def on_reconnect(self, resumed: bool) -> None:
        self.reconnects.inc()
        if resumed:
            self.resumed_reconnects.inc()

    def on_resync(self) -> None:
        self.resyncs.inc()

    def on_key_frame_dropped(self) -> None:
        self.key_frames_dropped.inc()

    def budget_set(self, uplink_bps: float | None, downlink_bps: float | None) -> None:
        """The byte budgets in force (None: that direction has none); reported from now on."""
        self._budget = (uplink_bps, downlink_bps)
        if uplink_bps is not None:
            self.uplink_budget.set(uplink_bps)
        if downlink_bps is not None:
            self.downlink_budget.set(downlink_bps)

    def on_key_frame_deferred(self) -> None:
        self.key_frames_deferred.inc()

    # -- the TELEMETRY report ----------------------------------------------------------------

    def telemetry(self) -> Telemetry:
        """The figures now, as the TELEMETRY message the server turns into
        ``shadowtutor_server_edge_*``."""
        with self._lock:
            since = None if self._last_install is None else time.monotonic() - self._last_install
        stride, version = _value(self.stride), _value(self.weights_version)
        return Telemetry(
            frames=int(_sample(self.frames)),
            key_frames=int(_sample(self.key_frames)),
            updates_applied=int(_sample(self.updates_applied)),
            resyncs=int(_sample(self.resyncs)),
            reconnects=int(_sample(self.reconnects)),
            bytes_sent=int(_sample(self.sent_bytes)),
            bytes_received=int(_sample(self.received_bytes)),
            waited_seconds=_sample(self.waited),
            stride=None if stride is None else int(stride),
            student_metric=_value(self.student_metric),
            weights_version=None if version is None else int(version),
            seconds_since_update=since,
            inference_seconds=_snapshot(self.inference),
            blocked_seconds=_snapshot(self.blocked),
            roundtrip_seconds=_snapshot(self.roundtrip),
            **self._field_operations(),
            **self._acceleration(),
            **self._budget_fields(),
        )

    def _budget_fields(self) -> dict[str, Any]:
        """The budgets and the key frames they held back; absent without a budget."""
        if self._budget is None:
            return {}
        up, down = self._budget
        return dict(
            key_frames_deferred=int(_sample(self.key_frames_deferred)),
            uplink_budget_bps=None if up is None else round(up),
            downlink_budget_bps=None if down is None else round(down),
        )

    def _field_operations(self) -> dict[str, Any]:
        """Drops while offline or out of disk, retention removals: always known."""
        dropped = _by_label(self._outputs_dropped, "output")
        return dict(
            key_frames_dropped=int(_sample(self.key_frames_dropped)),
            output_dropped={output: int(dropped[output]) for output in OUTPUTS},
            labels_removed=int(_sample(self.labels_removed_total)),
        )

    def _acceleration(self) -> dict[str, Any]:
        """The change-based, flow-path and cluster figures; each absent until its feature ran a
        frame."""
        fields: dict[str, Any] = {}
        modes = _by_label(self.change_based_frames, "mode")
        if modes:
            fields["change_based_frames"] = {mode: int(modes.get(mode, 0)) for mode in CHANGE_MODES}
            fields["changed_fraction"] = _by_label(self.changed_fraction, "layer")
        if self._flow_path:
            fields["regions"] = {
                path: int(_sample(counter)) for path, counter in self.regions.items()
            }
            fields["region_key_age_frames"] = _snapshot(self.region_key_age)
        if self._cluster:
            fields.update(
                cluster_workers=int(_sample(self.cluster_workers)),
                region_queue_depth=int(_sample(self.region_queue_depth)),
            )
        return fields

    # -- exposition --------------------------------------------------------------------------

    def exposition(self) -> bytes:
        return generate_latest(self.registry)

    def serve(self, host: str, port: int) -> int:
        """Serve ``/metrics`` over HTTP in a daemon thread; returns the bound port (``port`` 0 picks
        one). A port that cannot be bound (in use, not allowed) raises RuntimeError naming it."""
        try:
            server, _thread = start_http_server(port, addr=host, registry=self.registry)
        except OSError as exc:
            raise RuntimeError(
                f"cannot serve the metrics exporter on {host}:{port}: {exc.strerror or exc}; "
                "choose another "
                "--metrics-port (0 turns the exporter off)"
            ) from None
        self._server = server
        return server.server_port

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None


def _value(metric: MetricWrapperBase) -> float | None:
    """The one sample of a counter or gauge (labelled child or parent without children: None)."""
    for family in metric.collect():
        for sample in family.samples:
            if sample.name == family.name or sample.name == family.name + "_total":
                return sample.value
    return None


def _sample(metric: MetricWrapperBase) -> float:
    """:func:`_value` of an unlabelled counter or gauge, which always has its one sample."""
    value = _value(metric)
    if value is None:
        raise ValueError(f"{metric} has no sample of its own (a labelled metric?)")
    return value


def _by_label(metric: MetricWrapperBase, label: str) -> dict[str, float]:
    """A labelled counter's or gauge's value per value of ``label`` (children not created yet:
    absent)."""
    return {
        sample.labels[label]: sample.value
        for family in metric.collect()
        for sample in family.samples
        if sample.name in (family.name, family.name + "_total")
    }


def _snapshot(histogram: MetricWrapperBase) -> dict | None:
    buckets, total = [], 0.0
    for family in histogram.collect():
        for sample in family.samples:
            if sample.name.endswith("_bucket"):
                buckets.append((float(sample.labels["le"]), sample.value))
            elif sample.name.endswith("_sum"):
                total = sample.value
    return HistogramSnapshot.from_cumulative(buckets, total).to_wire() if buckets else None
