"""The edge agent: source -> client loop (Algorithm 4) over the WebSocket transport -> sinks and
metrics.

Distill mode runs the paper's client loop on every frame, from the first frame on: when the server
does not answer at start it labels with its own student (the last weights it held, kept in
``state_dir``, or the packaged one) and joins when the server comes back. Naive mode (the baseline)
sends every frame and waits for the server's label map. Both end cleanly at the end of a file, after
``max_frames``, or when :meth:`EdgeAgent.request_stop` is called (SIGINT/SIGTERM in the CLI): the
current frame is finished, the socket closed with 1000, the sinks flushed, and a :class:`RunSummary`
returned (and written to ``OUTPUT_DIR/summary.json``).
"""

from __future__ import annotations

import itertools
import json
import logging
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from edge_agent.backoff import Backoff
from edge_agent.handshake import SessionTerms
from edge_agent.metrics import EdgeMetrics
from edge_agent.runtime import StudentRuntime
from edge_agent.settings import EdgeSettings
from edge_agent.sinks import (
    LABELS_DIR,
    OVERLAY_FILE,
    LabelSink,
    OverlayVideoSink,
    PngLabelSink,
    ThreadedSink,
)
from edge_agent.sources import SourceError, VideoSource
from edge_agent.state import StateKeeper, initial_student, state_path
from edge_agent.tegrastats import TegrastatsMonitor
from edge_agent.tls import transport_security
from edge_agent.transport import EdgeTransport
from edge_agent.versioning import VersionedStudent
from shadowtutor.algorithms.client_loop import ClientLoop
from shadowtutor.algorithms.link_budget import KeyFrameBudget
from shadowtutor.algorithms.params import AlgorithmParams
from shadowtutor.classes import background_index
from shadowtutor.protocol.messages import Hello, SessionMode
from shadowtutor.protocol.video_stream import frame_codecs_for, scaled_frame_size
from shadowtutor.version import package_version

log = logging.getLogger(__name__)

SUMMARY_FILE = "summary.json"


@dataclass(kw_only=True)
class RunSummary:
    """What one run did; ``bytes_*`` count every WebSocket message, as the server does."""

    edge_id: str
    mode: SessionMode
    source: str
    server: str
    frames: int = 0
    # frames with a label map (all of them in distill mode)
    labelled_frames: int = 0
    # frames the loop chose as key frames (naive mode: every frame)
    key_frames: int = 0
    # frames that went out on the socket (fewer than key_frames while disconnected)
    frames_sent: int = 0
    # key frames chosen while no session was open: labelled, not sent
    key_frames_dropped: int = 0
    # failed output writes, by output
    label_writes_dropped: dict[str, int] = field(default_factory=dict)
    # the edge's own weights it started with (distill mode)
    initial_student: dict[str, Any] | None = None
    # times the held weights were saved to state_dir
    state_saves: int = 0
    # weight updates installed, WELCOME weights excluded
    updates_applied: int = 0
    # incremental updates whose base the edge did not hold (each asked a resync)
    updates_rejected: int = 0
    # in installation order
    versions_applied: list[dict[str, Any]] = field(default_factory=list)
    # session ids in the order they were opened (a resumed session is not a new one)
    sessions: list[str] = field(default_factory=list)
    # handshakes after the first: resumed sessions and new ones
    reconnects: int = 0
    # of those, the ones that resumed the session held (no weights downloaded)
    resumed_reconnects: int = 0
    resyncs_requested: int = 0
    bytes_sent: int = 0
    bytes_received: int = 0
    server_errors: dict[str, int] = field(default_factory=dict)
    # time inference blocked on the network
    waited_seconds: float = 0.0
    # the frame loop alone: first frame read to last frame labelled (no start-up)
    loop_seconds: float = 0.0
    # HELLO of the first handshake
    first_handshake_bytes_sent: int = 0
    # WELCOME of the first handshake (the full weights in distill mode)
    first_handshake_bytes_received: int = 0
    # HELLOs and WELCOMEs of every handshake, the first and each reconnect's
    handshake_bytes_sent_total: int = 0
    handshake_bytes_received_total: int = 0
    # key frame sent -> its update received
    update_roundtrip_seconds: list[float] = field(default_factory=list)
    final_stride: int | None = None
    last_metric: float | None = None
    wall_seconds: float = 0.0
    fps: float = 0.0
    key_frame_ratio: float = 0.0
    # end_of_source, max_frames or stop
    stopped_by: str = "end_of_source"
    # An acceleration's trial against the plain student (distill mode, once decided): its figures
    # and whether it stepped aside
    acceleration_trial: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class EdgeAgent:
    """One edge: build it from settings, call :meth:`run` (blocking) from the main thread or any
    other."""

    def __init__(self, settings: EdgeSettings, extra_sinks: Sequence[LabelSink] = ()) -> None:
        self.settings = settings
        self.extra_sinks = list(extra_sinks)
        self.stop_event = threading.Event()
        self.metrics = EdgeMetrics(settings.edge_id)
        # the bound port once the exporter runs
        self.metrics_port: int | None = None
        # Jetson power and thermal gauges, on a Jetson
        self.tegrastats: TegrastatsMonitor | None = None

    def request_stop(self) -> None:
        """Finish the current frame, then shut down (safe from a signal handler or another
        thread)."""
        self.stop_event.set()

    def run(self) -> RunSummary:
        try:
            summary = self._run()
            if self.metrics_port is not None:
                # a last scrape
                self.stop_event.wait(self.settings.linger)
            return summary
        finally:
            if self.tegrastats is not None:
                self.tegrastats.stop()
            self.metrics.stop()

    def _run(self) -> RunSummary:
        s = self.settings
        started = time.monotonic()
        backoff = Backoff(s.reconnect_min, s.reconnect_max)
        source = VideoSource(
            s.source, s.resize, s.source_retries, backoff=backoff, stop=self.stop_event
        )
        try:
            frames = iter(source)
            first = next(frames, None)
            if first is None:
                raise SourceError(f"source {s.source!r} delivered no frame")
            if s.metrics_port:
                self.metrics_port = self.metrics.serve(s.metrics_host, s.metrics_port)
                log.info("metrics on http://%s:%d/metrics", s.metrics_host, self.metrics_port)
                self.tegrastats = TegrastatsMonitor.start_if_available(
                    self.metrics.registry, s.edge_id
                )
            summary = RunSummary(edge_id=s.edge_id, mode=s.mode, source=s.source, server=s.server)
            sinks = ThreadedSink(self._open_sinks(source.fps), observer=self.metrics)
            try:
                self._run_session(
                    itertools.chain([first], frames),
                    (first.shape[1], first.shape[0]),
                    source.fps,
                    sinks,
                    summary,
                )
            finally:
                sinks.close()
                summary.label_writes_dropped = dict(sinks.dropped)
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
            sinks.append(
                PngLabelSink(
                    s.output_dir / LABELS_DIR,
                    max_bytes=s.labels_max_bytes,
                    max_age=s.labels_max_age,
                    observer=self.metrics,
                )
            )
        if s.overlay and s.output_dir is not None:
            background = background_index(s.class_names) if "background" in s.class_names else None
            sinks.append(OverlayVideoSink(s.output_dir / OVERLAY_FILE, fps, background))
        return sinks + self.extra_sinks

    def _run_session(
        self,
        frames: Iterable[np.ndarray],
        size: tuple[int, int],
        fps: float,
        sinks: LabelSink,
        summary: RunSummary,
    ) -> None:
        s = self.settings
        scale = s.key_frame_scale if s.mode == "distill" else 1.0
        sent = scaled_frame_size(size[0], size[1], scale)
        hello = Hello(
            edge_id=s.edge_id,
            class_names=list(s.class_names),
            frame_width=sent[0],
            frame_height=sent[1],
            mode=s.mode,
            student_arch="shadowtutor-student",
            frame_codecs=frame_codecs_for(s.frame_codecs, sent[0], sent[1]),
            weight_codecs=list(s.weight_codecs),
            token=None,
            agent=agent_name(),
            student_size=list(s.student_size) if s.student_size is not None else None,
            # this agent adapts its stride with a held-back answer's metric like any other
            update_gating=s.mode == "distill",
            downlink_budget_bps=s.downlink_budget if s.mode == "distill" else None,
        )
        student = None
        if s.mode == "distill":
            student = VersionedStudent(
                StudentRuntime(spec=s.labeller_spec()),
                s.class_names,
                lambda have, why: transport.request_resync(have, why),
            )
            # until a WELCOME names the session's
            student.runtime.set_student_size(s.student_size)
            local = initial_student(self._state_file(), s.class_names)
            if local is not None:
                student.start_with(local.tensors)
                summary.initial_student = local.describe()
        transport = EdgeTransport(
            s.server,
            hello,
            student,
            observer=self.metrics,
            backoff=Backoff(s.reconnect_min, s.reconnect_max),
            frame_quality=s.frame_quality,
            **transport_security(s),
            ping_interval=s.ping_interval,
            ping_timeout=s.ping_timeout,
            report=self.metrics.telemetry,
            key_frame_scale=scale,
            fps=fps,
        )
        transport.start()
        try:
            # weights of its own: it labels before the server answers
            if summary.initial_student is not None:
                info = transport.wait_first_attempt(s.startup_timeout, self.stop_event)
                if info is None:
                    log.warning(
                        "no session with %s yet (%s): labelling with the %s student, joining when "
                        "it answers",
                        s.server,
                        transport.last_error,
                        summary.initial_student["origin"],
                    )
            # naive mode, or no student of its own: nothing to label with before the server answers
            else:
                info = transport.wait_first_welcome(s.startup_timeout, self.stop_event)
            frames = self._timed(self._limited(frames, summary), summary)
            if student is None:
                self._run_naive(frames, transport, sinks, summary)
            else:
                self._run_distill(
                    frames,
                    transport,
                    student,
                    info,
                    self._budget_gate(transport, fps),
                    sinks,
                    summary,
                    fps,
                )
        finally:
            transport.close()
            if student is not None:
                summary.acceleration_trial = self._trial(student)
                student.runtime.close()
            summary.first_handshake_bytes_sent = transport.stats.first_handshake_bytes_sent
            summary.first_handshake_bytes_received = transport.stats.first_handshake_bytes_received
            summary.handshake_bytes_sent_total = transport.stats.handshake_bytes_sent_total
            summary.handshake_bytes_received_total = transport.stats.handshake_bytes_received_total
            summary.key_frames_dropped = transport.stats.key_frames_dropped
            summary.frames_sent = transport.stats.frames_sent
            summary.bytes_sent = transport.stats.bytes_sent
            summary.bytes_received = transport.stats.bytes_received
            summary.sessions = list(transport.stats.sessions)
            summary.reconnects = transport.stats.reconnects
            summary.resumed_reconnects = transport.stats.resumed
            summary.resyncs_requested = transport.stats.resyncs_requested
            summary.server_errors = dict(transport.stats.errors)
            summary.update_roundtrip_seconds = list(transport.stats.update_roundtrips)

    def _budget_gate(self, transport: EdgeTransport, fps: float) -> KeyFrameBudget | None:
        """The byte budget's gate over ``transport``'s bytes after the first handshake; None without
        a budget."""
        budget = self.settings.link_budget()
        if not budget.active:
            return None
        self.metrics.budget_set(budget.uplink_bps, budget.downlink_bps)
        stats = transport.stats

        def steady_bytes() -> tuple[int, int]:
            return (
                stats.bytes_sent - stats.first_handshake_bytes_sent,
                stats.bytes_received - stats.first_handshake_bytes_received,
            )

        return KeyFrameBudget(
            budget, fps, steady_bytes, on_denied=self.metrics.on_key_frame_deferred
        )

    def _state_file(self) -> Path | None:
        s = self.settings
        return state_path(s.state_dir, s.edge_id) if s.state_dir is not None else None

    def _limited(self, frames: Iterable[np.ndarray], summary: RunSummary) -> Iterator[np.ndarray]:
        """The frames until the source ends, ``max_frames`` is reached or a stop is requested, at
        most ``max_fps``."""
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
        """The frames as they are; ``summary.loop_seconds`` runs from the first read to the end of
        the last frame."""
        started = time.monotonic()
        for frame in frames:
            yield frame
            summary.loop_seconds = time.monotonic() - started

    def _run_distill(
        self,
        frames: Iterable[np.ndarray],
        transport: EdgeTransport,
        student: VersionedStudent,
        info: SessionTerms | None,
        gate: KeyFrameBudget | None,
        sinks: LabelSink,
        summary: RunSummary,
        fps: float,
    ) -> None:
        """The client loop on every frame of a source of ``fps`` frames a second; ``info`` None: no
        session yet (labels with the edge's own student).

        Offline, key frames fail at once (counted as dropped), so the loop never waits at
        MIN_STRIDE.
        """
        s = self.settings
        # Before the first session the paper's defaults; each session's WELCOME brings the server's.
        loop = ClientLoop(
            info.params if info else AlgorithmParams(),
            student,
            transport,
            wait_timeout=s.wait_timeout,
            gate=gate,
            fps=fps,
        )
        state = self._state_file()
        keeper = None
        if state is not None:
            keeper = StateKeeper(
                state,
                s.server,
                s.state_save_interval,
                on_dropped=lambda: self.metrics.output_dropped("state"),
            )
        seen = 0
        try:
            # a cluster starts the next frames early
            for frame in student.runtime.pipeline(frames):
                if transport.fatal is not None:
                    raise transport.fatal
                student.frame_index = loop.frame_index
                # full weights that arrived on their own: a WELCOME, a resync answer
                student.sync()
                session = transport.session
                if session is not None and session.params != loop.params:
                    loop.retune(session.params)
                if session is not None and session.student_size != student.runtime.student_size:
                    student.runtime.set_student_size(session.student_size)
                self._distill_frame(frame, loop, student, sinks, summary)
                if len(student.history) > seen:
                    seen = self._note_installs(student, seen)
                    if keeper is not None:
                        keeper.held(
                            student.held.state, s.class_names, student.session_id, student.version
                        )
        finally:
            if keeper is not None:
                keeper.flush()
                summary.state_saves = keeper.saves
        if loop.pending is not None and transport.connected:
            # let the last answer land so its bytes are counted
            loop.pending.wait(s.wait_timeout)
        summary.final_stride = loop.stride
        summary.versions_applied = [entry.to_dict() for entry in student.history]
        summary.updates_applied = student.updates_applied
        summary.updates_rejected = student.rejected

    def _distill_frame(
        self,
        frame: np.ndarray,
        loop: ClientLoop,
        student: VersionedStudent,
        sinks: LabelSink,
        summary: RunSummary,
    ) -> None:
        result = loop.process(frame)
        sinks.write(result.index, frame, result.labels)
        summary.frames += 1
        summary.labelled_frames += 1
        summary.key_frames += int(result.is_key_frame)
        summary.waited_seconds += result.waited_seconds
        self.metrics.frame_done(
            result.is_key_frame,
            result.inference_seconds,
            result.waited_seconds if result.wait_settled else None,
            result.stride,
        )
        stats = student.runtime.stats()
        if stats.change is not None:
            self.metrics.change_based_frame(stats.change.mode, stats.change.changed)
        self.metrics.regions_done(stats.regions)
        self.metrics.cluster_done(stats.cluster)
        self.metrics.acceleration_trial(stats.trial)
        if result.applied_metric is not None:
            summary.last_metric = result.applied_metric
            self.metrics.student_scored(result.applied_metric)

    @staticmethod
    def _trial(student: VersionedStudent) -> dict[str, Any] | None:
        trial = student.runtime.stats().trial
        return trial.to_dict() if trial is not None else None

    def _note_installs(self, student: VersionedStudent, seen: int) -> int:
        """Tell the metrics about the versions installed since ``seen`` entries of the history; the
        new count."""
        for entry in student.history[seen:]:
            self.metrics.weights_installed(entry.version, entry.origin)
        return len(student.history)

    def _run_naive(
        self,
        frames: Iterable[np.ndarray],
        transport: EdgeTransport,
        sinks: LabelSink,
        summary: RunSummary,
    ) -> None:
        for index, frame in enumerate(frames):
            if transport.fatal is not None:
                raise transport.fatal
            started = time.monotonic()
            pending = transport.request_labels(index, frame)
            pending.wait(self.settings.wait_timeout)
            reply = pending.result() if pending.done() else None
            waited = time.monotonic() - started
            summary.waited_seconds += waited
            summary.frames += 1
            summary.key_frames += 1
            self.metrics.frame_done(True, blocked_seconds=waited)
            if reply is None:
                log.warning("frame %d got no label map from the server", index)
                continue
            summary.labelled_frames += 1
            sinks.write(index, frame, reply.labels)


def agent_name() -> str:
    return f"shadowtutor-edge/{package_version()}"


def write_summary(path: Path, summary: RunSummary) -> None:
    """Write atomically, so that a reader polling for the file never sees half of it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(summary.to_dict(), indent=2))
    tmp.replace(path)
