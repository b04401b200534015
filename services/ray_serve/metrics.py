"""The teaching deployment as the ingress's ``/metrics`` shows it (the one endpoint Prometheus
scrapes).

Every answer of a teaching replica says which replica it came from, whether the session had to
be rebuilt there from its checkpoint (a move: after a replica's death, an eviction or a change of
the replica count) and what its checkpoint cost. ``teaching_replica_sessions`` counts, per
replica, the live sessions (edges ``live_edges`` names now) whose last answer came from it: an
edge that left stops counting at once. A replica reported lost leaves the series at once; one that
has not answered for ``forget_after`` seconds leaves it too.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from services.ray_serve.requests import Answer
from services.server.metrics.server_metrics import PREFIX

CHECKPOINT_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0)


class TeachingMetrics(Collector):
    """The teaching series, registered on ``registry``; ``live_edges()`` returns the edge ids with a
    session at the ingress now."""

    def __init__(
        self,
        registry: CollectorRegistry,
        live_edges: Callable[[], Collection[str]],
        forget_after: float = 120.0,
    ) -> None:
        self.forget_after = forget_after
        self.live_edges = live_edges
        # replica -> monotonic time it last answered
        self._heard: dict[str, float] = {}
        # edge id -> the replica that last answered for it
        self._edges: dict[str, str] = {}
        # time.time() of the last checkpoint an answer reported
        self._last_checkpoint: float | None = None
        self.moves = Counter(
            f"{PREFIX}session_moves",
            "Sessions a teaching replica rebuilt from their checkpoints (after a replica's death, "
            "an eviction, a scale change)",
            registry=registry,
        )
        self.retries = Counter(
            f"{PREFIX}teaching_retries",
            "Requests sent again because a teaching replica was lost",
            registry=registry,
        )
        self.checkpoint_seconds = Histogram(
            f"{PREFIX}checkpoint_seconds",
            "Time of a session's checkpoint writes (journal entry, snapshot) reported with an "
            "answer",
            buckets=CHECKPOINT_BUCKETS,
            registry=registry,
        )
        self.checkpoint_bytes = Histogram(
            f"{PREFIX}checkpoint_bytes",
            "Bytes of a session's checkpoint writes reported with an answer",
            buckets=tuple(2.0**k for k in range(10, 28, 2)),
            registry=registry,
        )
        registry.register(self)

    def record(self, answer: Answer, edge_id: str | None) -> None:
        """Count ``answer``, which a replica gave for ``edge_id`` (None: a request of no
        session)."""
        self._heard[answer.replica] = time.monotonic()
        if edge_id is not None:
            self._edges[edge_id] = answer.replica
        self.moves.inc(int(answer.moved))
        if answer.checkpoint_seconds is not None:
            self.checkpoint_seconds.observe(answer.checkpoint_seconds)
            self._last_checkpoint = time.time()
        if answer.checkpoint_bytes is not None:
            self.checkpoint_bytes.observe(answer.checkpoint_bytes)

    def lost(self, edge_id: str) -> str | None:
        """The replica that last answered for ``edge_id`` is lost (a request to it failed): it
        leaves the series and its edges count nowhere until another replica answers them. Returns
        that replica."""
        replica = self._edges.get(edge_id)
        if replica is not None:
            self._heard.pop(replica, None)
            self._edges = {edge: r for edge, r in self._edges.items() if r != replica}
        return replica

    def collect(self) -> Iterator[GaugeMetricFamily]:
        now = time.monotonic()
        live = set(self.live_edges())
        self._edges = {edge: replica for edge, replica in self._edges.items() if edge in live}
        self._heard = {
            r: heard for r, heard in self._heard.items() if now - heard <= self.forget_after
        }
        counts = dict.fromkeys(self._heard, 0)
        for replica in self._edges.values():
            if replica in counts:
                counts[replica] += 1
        sessions = GaugeMetricFamily(
            f"{PREFIX}teaching_replica_sessions",
            "Live sessions whose last answer came from each teaching replica",
            labels=["replica"],
        )
        for replica, count in sorted(counts.items()):
            sessions.add_metric([replica], count)
        yield sessions
        age = GaugeMetricFamily(
            f"{PREFIX}checkpoint_age_seconds",
            "Seconds since the last session checkpoint was written (0 before the first)",
        )
        age.add_metric(
            [], 0.0 if self._last_checkpoint is None else time.time() - self._last_checkpoint
        )
        yield age
