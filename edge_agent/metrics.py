"""The edge's Prometheus exporter (default port 9108); every series is labelled ``edge_id``.

The metric names are a contract with the dashboards and alert rules in ``dashboards/``.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest, start_http_server

if TYPE_CHECKING:
    from shadowtutor.acceleration.regions.labeller import FrameRegions

ROUNDTRIP_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
KEY_AGE_BUCKETS = (0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32)
REGION_PATHS = ("segment", "flow")  # shadowtutor.acceleration.regions.labeller.SEGMENT and FLOW


class FpsMeter:
    """Frames per second, exponentially smoothed over the intervals between frames."""

    def __init__(self, smoothing: float = 0.1) -> None:
        if not 0 < smoothing <= 1:
            raise ValueError(f"smoothing must lie in (0, 1], got {smoothing}")
        self.smoothing = smoothing
        self._last: float | None = None
        self._interval: float | None = None

    def tick(self, now: float | None = None) -> float:
        """Count one frame; returns the smoothed rate (0 until two frames were seen)."""
        now = time.monotonic() if now is None else now
        if self._last is not None:
            interval = max(now - self._last, 1e-9)
            self._interval = (
                interval if self._interval is None else self._interval + self.smoothing * (interval - self._interval)
            )
        self._last = now
        return 1.0 / self._interval if self._interval else 0.0


class EdgeMetrics:
    """The edge's series in their own registry; also the transport's observer."""

    def __init__(self, edge_id: str, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        self.edge_id = edge_id
        self._server = None
        self._fps_meter = FpsMeter()

        def make(kind, name, doc, **kwargs):
            return kind(name, doc, ["edge_id"], registry=self.registry, **kwargs).labels(edge_id=edge_id)

        self.frames = make(Counter, "shadowtutor_edge_frames_total", "Frames labelled by the edge")
        self.key_frames = make(Counter, "shadowtutor_edge_key_frames_total", "Key frames sent to the server")
        self.fps = make(Gauge, "shadowtutor_edge_fps", "Frames per second, smoothed")
        self.sent_bytes = make(Counter, "shadowtutor_edge_sent_bytes_total", "Bytes of WebSocket messages sent")
        self.received_bytes = make(
            Counter, "shadowtutor_edge_received_bytes_total", "Bytes of WebSocket messages received"
        )
        self.stride = make(Gauge, "shadowtutor_edge_stride", "Frames between key frames now in force")
        self.student_metric = make(
            Gauge, "shadowtutor_edge_student_metric", "The student's metric (mIoU 0..1) in the last update"
        )
        self.roundtrip = make(
            Histogram, "shadowtutor_edge_update_roundtrip_seconds",
            "Time from sending a key frame to receiving its update", buckets=ROUNDTRIP_BUCKETS,
        )
        self.connected = make(Gauge, "shadowtutor_edge_connected", "1 while a session with the server is open")
        self.updates_applied = make(
            Counter, "shadowtutor_edge_updates_applied_total", "Weight updates installed (WELCOME weights excluded)"
        )
        self.resyncs = make(Counter, "shadowtutor_edge_resyncs_total", "Full-weight resyncs requested")
        self.reconnects = make(Counter, "shadowtutor_edge_reconnects_total", "Sessions opened after the first")
        # The flow path (--flow-path): regions per path, and the age of the keys they were warped from.
        regions = Counter("shadowtutor_edge_regions_total", "Frame regions labelled, by path: segment (the "
                          "student) or flow (warped from the region's key)", ["edge_id", "path"],
                          registry=self.registry)
        self.regions = {path: regions.labels(edge_id=edge_id, path=path) for path in REGION_PATHS}
        self.region_key_age = make(
            Histogram, "shadowtutor_edge_region_key_age_frames",
            "Frames since each region's key was segmented, after each frame (0: segmented now)",
            buckets=KEY_AGE_BUCKETS,
        )
        # The edge cluster (--cluster): its live workers and the regions left waiting for an idle one.
        self.cluster_workers = make(Gauge, "shadowtutor_edge_cluster_workers", "Live workers of the edge cluster")
        self.region_queue_depth = make(
            Gauge, "shadowtutor_edge_region_queue_depth", "Regions waiting for an idle cluster worker, last frame"
        )

    # -- per frame, from the agent ---------------------------------------------------------

    def frame_done(self, is_key_frame: bool, stride: int | None = None) -> None:
        self.frames.inc()
        if is_key_frame:
            self.key_frames.inc()
        if stride is not None:
            self.stride.set(stride)
        self.fps.set(self._fps_meter.tick())

    def regions_done(self, frame: FrameRegions | None) -> None:
        """Count one frame's regions by path (nothing without the flow path)."""
        if frame is None:
            return
        for path, age in zip(frame.paths, frame.key_ages, strict=True):
            self.regions[path].inc()
            self.region_key_age.observe(age)

    def cluster_done(self, state: tuple[int, int] | None) -> None:
        """Record the cluster's live workers and queue depth (nothing without a cluster)."""
        if state is not None:
            self.cluster_workers.set(state[0])
            self.region_queue_depth.set(state[1])

    def update_applied(self, metric: float | None) -> None:
        self.updates_applied.inc()
        if metric is not None:
            self.student_metric.set(metric)

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

    def on_reconnect(self) -> None:
        self.reconnects.inc()

    def on_resync(self) -> None:
        self.resyncs.inc()

    # -- exposition --------------------------------------------------------------------------

    def exposition(self) -> bytes:
        return generate_latest(self.registry)

    def serve(self, host: str, port: int) -> int:
        """Serve ``/metrics`` over HTTP in a daemon thread; returns the bound port (``port`` 0 picks one)."""
        server, _thread = start_http_server(port, addr=host, registry=self.registry)
        self._server = server
        return server.server_port

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
