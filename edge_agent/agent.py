"""The edge agent: source -> client loop (Algorithm 4) over the WebSocket transport -> sinks and metrics.

Distill mode runs the paper's client loop on every frame; naive mode (the baseline) sends
every frame and waits for the server's label map. Both end cleanly at the end of a file,
after ``max_frames``, or when :meth:`EdgeAgent.request_stop` is called (SIGINT/SIGTERM in
the CLI): the current frame is finished, the socket closed with 1000, the sinks flushed,
and a :class:`RunSummary` returned (and written to ``OUTPUT_DIR/summary.json``).
"""

from __future__ import annotations

import itertools
import json
import logging
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

from edge_agent.backoff import Backoff
from edge_agent.metrics import EdgeMetrics
from edge_agent.runtime import StudentRuntime
from edge_agent.settings import EdgeSettings
from edge_agent.sinks import LABELS_DIR, OVERLAY_FILE, LabelSink, OverlayVideoSink, PngLabelSink, ThreadedSink
from edge_agent.sources import SourceError, VideoSource
from edge_agent.tls import transport_security
from edge_agent.transport import EdgeTransport, SessionInfo
from edge_agent.versioning import VersionedStudent
from shadowtutor.algorithms.client_loop import ClientLoop
from shadowtutor.classes import background_index
from shadowtutor.protocol.messages import Hello

log = logging.getLogger(__name__)

SUMMARY_FILE = "summary.json"


@dataclass
class RunSummary:
    """What one run did; ``bytes_*`` count every WebSocket message, as the server does."""

    edge_id: str
    mode: str
    source: str
    server: str
    frames: int = 0
    labelled_frames: int = 0  # frames with a label map (all of them in distill mode)
    key_frames: int = 0  # frames the loop chose as key frames (naive mode: every frame)
    frames_sent: int = 0  # frames that went out on the socket (fewer than key_frames while disconnected)
    updates_applied: int = 0  # weight updates installed, WELCOME weights excluded
    updates_rejected: int = 0  # incremental updates whose base the edge did not hold (each asked a resync)
    versions_applied: list[dict[str, Any]] = field(default_factory=list)  # in installation order
    sessions: list[str] = field(default_factory=list)
    reconnects: int = 0
    resyncs_requested: int = 0
    bytes_sent: int = 0
    bytes_received: int = 0
    server_errors: dict[str, int] = field(default_factory=dict)
    waited_seconds: float = 0.0  # time inference blocked on the network
    loop_seconds: float = 0.0  # the frame loop alone: first frame read to last frame labelled (no start-up)
    handshake_bytes_sent: int = 0  # HELLO of the first session
    handshake_bytes_received: int = 0  # WELCOME of the first session (the full weights in distill mode)
    update_roundtrip_seconds: list[float] = field(default_factory=list)  # key frame sent -> its update received
    final_stride: int | None = None
    last_metric: float | None = None
    wall_seconds: float = 0.0
    fps: float = 0.0
    key_frame_ratio: float = 0.0
    stopped_by: str = "end_of_source"  # end_of_source, max_frames or stop

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class EdgeAgent:
    """One edge: build it from settings, call :meth:`run` (blocking) from the main thread or any other."""

    def __init__(self, settings: EdgeSettings, extra_sinks: Sequence[LabelSink] = ()) -> None:
        self.settings = settings
        self.extra_sinks = list(extra_sinks)
        self.stop_event = threading.Event()
        self.metrics = EdgeMetrics(settings.edge_id)
        self.metrics_port: int | None = None  # the bound port once the exporter runs

    def request_stop(self) -> None:
        """Finish the current frame, then shut down (safe from a signal handler or another thread)."""
        self.stop_event.set()

    def run(self) -> RunSummary:
        try:
            summary = self._run()
            if self.metrics_port is not None:
                self.stop_event.wait(self.settings.linger)  # a last scrape
            return summary
        finally:
            self.metrics.stop()

    def _run(self) -> RunSummary:
        s = self.settings
        started = time.monotonic()
        backoff = Backoff(s.reconnect_min, s.reconnect_max)
        source = VideoSource(s.source, s.resize, s.source_retries, backoff, stop=self.stop_event)
        try:
            frames = iter(source)
            first = next(frames, None)
            if first is None:
                raise SourceError(f"source {s.source!r} delivered no frame")
            if s.metrics_port:
                self.metrics_port = self.metrics.serve(s.metrics_host, s.metrics_port)
                log.info("metrics on http://%s:%d/metrics", s.metrics_host, self.metrics_port)
            summary = RunSummary(s.edge_id, s.mode, s.source, s.server)
            sinks = ThreadedSink(self._open_sinks(source.fps))
            try:
                self._run_session(itertools.chain([first], frames), (first.shape[1], first.shape[0]), sinks, summary)
            finally:
                sinks.close()
        finally:
            source.close()
        summary.wall_seconds = time.monotonic() - started
        summary.fps = summary.frames / summary.wall_seconds if summary.wall_seconds > 0 else 0.0
        summary.key_frame_ratio = summary.key_frames / summary.frames if summary.frames else 0.0
        if s.output_dir is not None:
            write_summary(s.output_dir / SUMMARY_FILE, summary)
        return summary

    def _open_sinks(self, fps: float) -> list[LabelSink]:
        s = self.settings
        sinks: list[LabelSink] = []
        if s.output_dir is not None and s.save_labels:
            sinks.append(PngLabelSink(s.output_dir / LABELS_DIR))
        if s.overlay and s.output_dir is not None:
            background = background_index(s.class_names) if "background" in s.class_names else None
            sinks.append(OverlayVideoSink(s.output_dir / OVERLAY_FILE, fps, background))
        return sinks + self.extra_sinks

    def _run_session(
        self, frames: Iterable[np.ndarray], size: tuple[int, int], sinks: LabelSink, summary: RunSummary
    ) -> None:
        s = self.settings
        hello = Hello(s.edge_id, list(s.class_names), size[0], size[1], s.mode, "shadowtutor-student",
                      list(s.frame_codecs), list(s.weight_codecs), None, agent_name())
        student = None
        if s.mode == "distill":
            student = VersionedStudent(
                StudentRuntime(s.backend, s.flow_path_config(), s.cluster), s.class_names,
                lambda have, why: transport.request_resync(have, why),
            )
        transport = EdgeTransport(s.server, hello, student, self.metrics,
                                  Backoff(s.reconnect_min, s.reconnect_max), s.frame_quality, **transport_security(s),
                                  ping_interval=s.ping_interval, ping_timeout=s.ping_timeout)
        transport.start()
        try:
            info = transport.wait_first_welcome(s.startup_timeout, self.stop_event)
            summary.handshake_bytes_sent = transport.stats.bytes_sent
            summary.handshake_bytes_received = transport.stats.bytes_received
            frames = self._timed(self._limited(frames, summary), summary)
            if student is None:
                self._run_naive(frames, transport, sinks, summary)
            else:
                self._run_distill(frames, transport, student, info, sinks, summary)
        finally:
            transport.close()
            summary.frames_sent = transport.stats.frames_sent
            summary.bytes_sent = transport.stats.bytes_sent
            summary.bytes_received = transport.stats.bytes_received
            summary.sessions = list(transport.stats.sessions)
            summary.reconnects = transport.stats.reconnects
            summary.resyncs_requested = transport.stats.resyncs_requested
            summary.server_errors = dict(transport.stats.errors)
            summary.update_roundtrip_seconds = list(transport.stats.update_roundtrips)

    def _limited(self, frames: Iterable[np.ndarray], summary: RunSummary) -> Iterator[np.ndarray]:
        """The frames until the source ends, ``max_frames`` is reached or a stop is requested, at most ``max_fps``."""
        limit, max_fps = self.settings.max_frames, self.settings.max_fps
        next_due = time.monotonic()
        for index, frame in enumerate(frames):
            if max_fps is not None:
                self.stop_event.wait(max(0.0, next_due - time.monotonic()))
                next_due = max(next_due, time.monotonic()) + 1.0 / max_fps
            if self.stop_event.is_set():
                summary.stopped_by = "stop"
                return
            if limit is not None and index >= limit:
                summary.stopped_by = "max_frames"
                return
            yield frame

    @staticmethod
    def _timed(frames: Iterable[np.ndarray], summary: RunSummary) -> Iterator[np.ndarray]:
        """The frames as they are; ``summary.loop_seconds`` runs from the first read to the end of the last frame."""
        started = time.monotonic()
        for frame in frames:
            yield frame
            summary.loop_seconds = time.monotonic() - started

    def _run_distill(
        self,
        frames: Iterable[np.ndarray],
        transport: EdgeTransport,
        student: VersionedStudent,
        info: SessionInfo,
        sinks: LabelSink,
        summary: RunSummary,
    ) -> None:
        loop = ClientLoop(info.params, student, transport, wait_timeout=self.settings.wait_timeout)
        student.sync()  # the first WELCOME's weights
        seen = len(student.history)
        for frame in frames:
            if transport.fatal is not None:
                raise transport.fatal
            student.frame_index = loop.frame_index
            student.sync()
            result = loop.process(frame)
            sinks.write(result.index, frame, result.labels)
            summary.frames += 1
            summary.labelled_frames += 1
            summary.key_frames += int(result.is_key_frame)
            summary.waited_seconds += result.waited_seconds
            self.metrics.frame_done(result.is_key_frame, result.stride)
            self.metrics.regions_done(student.runtime.last_regions)
            self.metrics.cluster_done(student.runtime.cluster_state)
            if result.applied_metric is not None:
                summary.last_metric = result.applied_metric
                self.metrics.student_metric.set(result.applied_metric)
            for entry in student.history[seen:]:
                if entry.origin != "welcome":
                    self.metrics.updates_applied.inc()
            seen = len(student.history)
        if loop.pending is not None and transport.connected:
            loop.pending.wait(self.settings.wait_timeout)  # let the last answer land so its bytes are counted
        summary.final_stride = loop.stride
        summary.versions_applied = [entry.to_dict() for entry in student.history]
        summary.updates_applied = student.updates_applied
        summary.updates_rejected = student.rejected

    def _run_naive(
        self, frames: Iterable[np.ndarray], transport: EdgeTransport, sinks: LabelSink, summary: RunSummary
    ) -> None:
        for index, frame in enumerate(frames):
            if transport.fatal is not None:
                raise transport.fatal
            started = time.monotonic()
            pending = transport.request_labels(index, frame)
            pending.wait(self.settings.wait_timeout)
            reply = pending.result() if pending.done() else None
            summary.waited_seconds += time.monotonic() - started
            summary.frames += 1
            summary.key_frames += 1
            self.metrics.frame_done(True)
            if reply is None:
                log.warning("frame %d got no label map from the server", index)
                continue
            summary.labelled_frames += 1
            sinks.write(index, frame, reply.labels)


def agent_name() -> str:
    try:
        return f"shadowtutor-edge/{metadata.version('shadowtutor')}"
    except metadata.PackageNotFoundError:
        return "shadowtutor-edge"


def write_summary(path: Path, summary: RunSummary) -> None:
    """Write atomically, so that a reader polling for the file never sees half of it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(summary.to_dict(), indent=2))
    tmp.replace(path)
