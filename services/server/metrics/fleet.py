"""Per-edge series on the server's ``/metrics``: what each edge reports in TELEMETRY, plus its
sessions.

The series are labelled ``edge_id`` and named ``shadowtutor_server_edge_*``: the edge exporter's
``shadowtutor_edge_*`` figures (docs/deploy/metrics.md, "Fleet metrics"), so a fleet is watched
without scraping any edge. Cardinality is bounded: at most ``max_edges`` edges have series at
once. An edge whose session ended keeps its series (``connected`` 0) for ``retention`` seconds,
then they are removed; when all slots are taken, the edge that ended longest ago gives up its
slot, and when every slot is held by a connected edge a newcomer gets none (counted in
``shadowtutor_server_fleet_overflow_total``) until one frees.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import NamedTuple

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from shadowtutor.protocol.messages import SessionMode
from shadowtutor.protocol.telemetry import LABELS, STUDENT_LAYERS, EdgeReport

PREFIX = "shadowtutor_server_edge_"
DEFAULT_MAX_EDGES = 200
DEFAULT_RETENTION = 3600.0
# of HELLO's free-text agent, as a label value
MAX_AGENT_CHARS = 64

# TELEMETRY counters: field -> (series name without _total, help)
COUNTERS = {
    "frames": ("frames", "Frames the edge labelled (rate() of it is the edge's FPS)"),
    "key_frames": ("key_frames", "Key frames the edge chose"),
    "updates_applied": (
        "updates_applied",
        "Weight updates the edge installed (WELCOME weights excluded)",
    ),
    "resyncs": ("resyncs", "Full-weight resyncs the edge requested"),
    "reconnects": (
        "reconnects",
        "Handshakes after the edge's first (resumed sessions and new ones)",
    ),
    "bytes_sent": ("sent_bytes", "Bytes of WebSocket messages the edge sent"),
    "bytes_received": ("received_bytes", "Bytes of WebSocket messages the edge received"),
    "waited_seconds": ("waited_seconds", "Seconds the edge's inference waited for the server"),
    "key_frames_dropped": (
        "key_frames_dropped",
        "Key frames the edge dropped because no session was open",
    ),
    "labels_removed": ("labels_removed", "Label-map files the edge's retention removed"),
    "key_frames_deferred": (
        "key_frames_deferred",
        "Frames whose key frame the edge's byte budget held back",
    ),
}
# TELEMETRY's labelled counters: field -> (series name without _total, label, help); label values:
# LABELS
LABELLED_COUNTERS = {
    "output_dropped": (
        "output_dropped",
        "output",
        "Writes an edge output dropped (disk full, I/O error)",
    ),
    "change_based_frames": (
        "change_based_frames",
        "mode",
        "Frames of the edge's change-based student by how they ran: change, full (through the "
        "caches), fallback (full-frame backend)",
    ),
    "regions": (
        "regions",
        "path",
        "Frame regions the edge labelled by path: segment (the student) or flow (warped from the "
        "region's key)",
    ),
}
GAUGES = {
    "stride": ("stride", "Frames between key frames now in force on the edge"),
    "student_metric": (
        "student_metric",
        "The student's metric (mIoU 0..1) in the edge's last applied update",
    ),
    "weights_version": (
        "weights_version",
        "Version of the weights the edge holds (in its current session)",
    ),
    "cluster_workers": ("cluster_workers", "Live workers of the edge's cluster"),
    "region_queue_depth": (
        "region_queue_depth",
        "Regions waiting for an idle worker of the edge's cluster",
    ),
    "uplink_budget_bps": (
        "uplink_budget_bps",
        "The edge's uplink budget, bits per second (absent: none)",
    ),
    "downlink_budget_bps": (
        "downlink_budget_bps",
        "The edge's downlink budget, bits per second (absent: none)",
    ),
}
HISTOGRAMS = {
    "inference_seconds": (
        "inference_seconds",
        "Student inference time per frame on the edge (T_SI)",
    ),
    "blocked_seconds": (
        "blocked_seconds",
        "Time the edge waited at MIN_STRIDE for each key frame's update, 0 when in time (naive "
        "mode: for each frame's labels)",
    ),
    "roundtrip_seconds": (
        "update_roundtrip_seconds",
        "Time from sending a key frame to receiving its update",
    ),
    "region_key_age_frames": (
        "region_key_age_frames",
        "Frames since each region's key was segmented on the edge, after each frame (0: segmented "
        "now)",
    ),
}


@dataclass(kw_only=True)
class EdgeRecord:
    """What the fleet view knows of one edge id: its latest session, whether it is connected, how
    many sessions it opened and its last TELEMETRY report."""

    edge_id: str
    # the latest session (an older one of the same edge may end after it opened)
    session_id: str
    mode: SessionMode
    agent: str
    connected: bool = True
    sessions: int = 0
    # monotonic time the last session ended
    ended_at: float | None = None
    report: EdgeReport | None = None
    # wall-clock time of the last report
    report_time: float | None = None
    # where the server gates the edge's updates: its downlink budget (None: none), the bits per
    # second answered over the budget's window, and the answers that held the training back
    update_budget_bps: float | None = None
    answered_bps: float | None = None
    updates_held_back: int | None = None


class _Reported(NamedTuple):
    """An edge with a report: its id, its last report and the wall-clock time it came."""

    edge_id: str
    report: EdgeReport
    time: float


@dataclass(kw_only=True)
class _Open:
    """An open session without series (over the cap): what it needs to get them later."""

    session_id: str
    mode: SessionMode
    agent: str
    sessions: int = 1


class FleetCollector(Collector):
    """The per-edge table and its exposition; its methods are called from the server's event
    loop."""

    def __init__(
        self,
        max_edges: int = DEFAULT_MAX_EDGES,
        retention: float = DEFAULT_RETENTION,
        clock: Callable[[], float] = time.monotonic,
        *,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        if max_edges < 0 or retention < 0:
            raise ValueError("max_edges and retention must be >= 0")
        self.max_edges = max_edges
        self.retention = retention
        # sessions and reports that found no free slot
        self.overflow = 0
        self._clock = clock
        self._wall_clock = wall_clock
        self._records: dict[str, EdgeRecord] = {}
        # open sessions without series
        self._waiting: dict[str, _Open] = {}
        self._lock = threading.Lock()

    # -- events -----------------------------------------------------------------------------

    def session_opened(self, edge_id: str, session_id: str, mode: SessionMode, agent: str) -> None:
        with self._lock:
            record = self._records.get(edge_id)
            if record is None:
                waiting = self._waiting.get(edge_id)
                sessions = waiting.sessions + 1 if waiting is not None else 1
                self._waiting[edge_id] = _Open(
                    session_id=session_id,
                    mode=mode,
                    agent=agent[:MAX_AGENT_CHARS],
                    sessions=sessions,
                )
                self._admit(edge_id)
                return
            record.sessions += 1
            record.session_id, record.mode, record.agent = session_id, mode, agent[:MAX_AGENT_CHARS]
            record.connected, record.ended_at = True, None

    def session_ended(self, edge_id: str, session_id: str) -> None:
        with self._lock:
            waiting = self._waiting.get(edge_id)
            if waiting is not None and waiting.session_id == session_id:
                del self._waiting[edge_id]
            record = self._records.get(edge_id)
            if record is not None and record.session_id == session_id:
                record.connected, record.ended_at = False, self._clock()

    def report(self, edge_id: str, report: EdgeReport) -> None:
        with self._lock:
            record = self._records.get(edge_id) or self._admit(edge_id)
            if record is not None:
                record.report, record.report_time = report, self._wall_clock()

    def updates(
        self, edge_id: str, budget_bps: float | None, answered_bps: float, held_back: int
    ) -> None:
        """The server's gate of ``edge_id``'s updates after an answer: the downlink budget (None:
        none), the bits per second answered over its window, the held-back answers so far."""
        with self._lock:
            record = self._records.get(edge_id)
            if record is not None:
                record.update_budget_bps, record.answered_bps = budget_bps, answered_bps
                record.updates_held_back = held_back

    def _admit(self, edge_id: str) -> EdgeRecord | None:
        """Give a waiting edge a slot if one is free or can be freed; else count the overflow."""
        opened = self._waiting.get(edge_id)
        # a report after its session ended: nothing to attach it to
        if opened is None:
            return None
        self._expire()
        if len(self._records) >= self.max_edges:
            ended = [r for r in self._records.values() if not r.connected]
            if not ended:
                self.overflow += 1
                return None
            del self._records[min(ended, key=lambda r: r.ended_at or 0.0).edge_id]
        del self._waiting[edge_id]
        record = EdgeRecord(
            edge_id=edge_id,
            session_id=opened.session_id,
            mode=opened.mode,
            agent=opened.agent,
            sessions=opened.sessions,
        )
        self._records[edge_id] = record
        return record

    def _expire(self) -> None:
        now = self._clock()
        for record in list(self._records.values()):
            if record.ended_at is not None and now - record.ended_at > self.retention:
                del self._records[record.edge_id]

    # -- exposition -------------------------------------------------------------------------

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            self._expire()
            records = sorted(self._records.values(), key=lambda r: r.edge_id)
            overflow = self.overflow
        labels = ["edge_id"]
        yield _gauge(
            "shadowtutor_server_fleet_edges",
            "Edges with per-edge series now (at most max_edge_series)",
            [],
            [([], len(records))],
        )
        overflow_family = CounterMetricFamily(
            "shadowtutor_server_fleet_overflow",
            "Sessions and reports of edges left without per-edge series because max_edge_series "
            "edges held them",
            labels=[],
        )
        overflow_family.add_metric([], overflow)
        yield overflow_family
        yield _gauge(
            f"{PREFIX}connected",
            "1 while the edge has a session open, 0 after it ended",
            labels,
            [([r.edge_id], int(r.connected)) for r in records],
        )
        sessions = CounterMetricFamily(
            f"{PREFIX}sessions", "Sessions the edge opened with this server", labels=labels
        )
        info = GaugeMetricFamily(
            f"{PREFIX}info",
            "The edge's session mode and agent (HELLO), value 1",
            labels=["edge_id", "mode", "agent"],
        )
        for record in records:
            sessions.add_metric([record.edge_id], record.sessions)
            info.add_metric([record.edge_id, record.mode, record.agent], 1)
        yield sessions
        yield info
        yield _gauge(
            f"{PREFIX}update_budget_bps",
            "The server's downlink budget for the edge's updates, bits per second (absent: none)",
            labels,
            [([r.edge_id], r.update_budget_bps) for r in records],
        )
        yield _gauge(
            f"{PREFIX}answered_bps",
            "Bits per second of the server's answers to the edge's key frames (updates and "
            "held-back answers) over the update budget's window; absent where updates are not "
            "gated",
            labels,
            [([r.edge_id], r.answered_bps) for r in records],
        )
        held_back = CounterMetricFamily(
            f"{PREFIX}updates_held_back",
            "Key frames the server answered without its training (it did not pay yet)",
            labels=labels,
        )
        for record in records:
            if record.updates_held_back is not None:
                held_back.add_metric([record.edge_id], record.updates_held_back)
        yield held_back
        reported = [
            _Reported(r.edge_id, r.report, r.report_time)
            for r in records
            if r.report is not None and r.report_time is not None
        ]
        yield _gauge(
            f"{PREFIX}last_report_timestamp_seconds",
            "Unix time of the edge's last TELEMETRY",
            labels,
            [([r.edge_id], r.time) for r in reported],
        )
        for field_name, (name, doc) in COUNTERS.items():
            family = CounterMetricFamily(f"{PREFIX}{name}", doc, labels=labels)
            for r in reported:
                value = getattr(r.report.telemetry, field_name)
                if value is not None:
                    family.add_metric([r.edge_id], value)
            yield family
        for field_name, (name, label, doc) in LABELLED_COUNTERS.items():
            family = CounterMetricFamily(f"{PREFIX}{name}", doc, labels=["edge_id", label])
            for r, key, value in _keyed(reported, field_name, LABELS[field_name]):
                family.add_metric([r.edge_id, key], value)
            yield family
        yield _gauge(
            f"{PREFIX}changed_fraction",
            "Fraction of each layer's input positions that changed in the edge's last frame run "
            "change-based",
            ["edge_id", "layer"],
            [
                ([r.edge_id, key], value)
                for r, key, value in _keyed(reported, "changed_fraction", STUDENT_LAYERS)
            ],
        )
        for field_name, (name, doc) in GAUGES.items():
            yield _gauge(
                f"{PREFIX}{name}",
                f"{doc}; absent until known",
                labels,
                [([r.edge_id], getattr(r.report.telemetry, field_name)) for r in reported],
            )
        yield _gauge(
            f"{PREFIX}last_update_timestamp_seconds",
            "Unix time (server clock) the edge last installed weights; time() minus it: seconds "
            "since",
            labels,
            [
                ([r.edge_id], r.time - r.report.telemetry.seconds_since_update)
                for r in reported
                if r.report.telemetry.seconds_since_update is not None
            ],
        )
        for field_name, (name, doc) in HISTOGRAMS.items():
            histogram = HistogramMetricFamily(f"{PREFIX}{name}", doc, labels=labels)
            for r in reported:
                snapshot = r.report.histograms.get(field_name)
                if snapshot is not None:
                    buckets = [
                        (floatToGoString(bound), count) for bound, count in snapshot.cumulative()
                    ]
                    histogram.add_metric([r.edge_id], buckets, snapshot.sum)
            yield histogram


def _keyed(
    records: list[_Reported], field_name: str, keys: tuple[str, ...]
) -> Iterator[tuple[_Reported, str, float]]:
    """``(record, key, value)`` of a TELEMETRY object field, keys in the order of the fixed set
    ``keys``."""
    for r in records:
        values = getattr(r.report.telemetry, field_name) or {}
        yield from ((r, key, values[key]) for key in keys if key in values)


def _gauge(
    name: str, doc: str, labels: list[str], values: list[tuple[list[str], float | None]]
) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, doc, labels=labels)
    for label_values, value in values:
        if value is not None:
            family.add_metric(label_values, value)
    return family
