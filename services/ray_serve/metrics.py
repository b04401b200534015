"""The teaching deployment as the ingress's ``/metrics`` shows it (the one endpoint Prometheus scrapes).

Every answer of a teaching replica says which replica it came from, how many sessions that
replica holds, whether the session had to be rebuilt there from its checkpoint (a move: after a
replica's death, an eviction or a change of the replica count) and what its checkpoint cost.
A replica that has not answered for ``forget_after`` seconds leaves the per-replica series.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from services.ray_serve.requests import Answer
from services.server.metrics import PREFIX

CHECKPOINT_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0)


class TeachingMetrics(Collector):
    def __init__(self, registry: CollectorRegistry, forget_after: float = 120.0) -> None:
        self.forget_after = forget_after
        self._replicas: dict[str, tuple[int, float]] = {}  # replica -> (sessions, monotonic time heard)
        self._last_checkpoint: float | None = None  # time.time() of the last checkpoint an answer reported
        self.moves = Counter(f"{PREFIX}session_moves", "Sessions a teaching replica rebuilt from their "
                             "checkpoints (after a replica's death, an eviction, a scale change)", registry=registry)
        self.retries = Counter(f"{PREFIX}teaching_retries", "Requests sent again because a teaching replica was "
                               "lost", registry=registry)
        self.checkpoint_seconds = Histogram(f"{PREFIX}checkpoint_seconds", "Time to checkpoint a session after "
                                            "an update", buckets=CHECKPOINT_BUCKETS, registry=registry)
        self.checkpoint_bytes = Histogram(f"{PREFIX}checkpoint_bytes", "Size of a session checkpoint",
                                          buckets=tuple(2.0**k for k in range(14, 28, 2)), registry=registry)
        registry.register(self)

    def record(self, answer: Answer) -> None:
        self._replicas[answer.replica] = (answer.sessions, time.monotonic())
        self.moves.inc(int(answer.moved))
        if answer.checkpoint_seconds is not None:
            self.checkpoint_seconds.observe(answer.checkpoint_seconds)
            self._last_checkpoint = time.time()
        if answer.checkpoint_bytes is not None:
            self.checkpoint_bytes.observe(answer.checkpoint_bytes)

    def collect(self) -> Iterator[GaugeMetricFamily]:
        now = time.monotonic()
        sessions = GaugeMetricFamily(f"{PREFIX}teaching_replica_sessions",
                                     "Sessions whose student each teaching replica holds", labels=["replica"])
        for replica, (count, heard) in sorted(self._replicas.items()):
            if now - heard <= self.forget_after:
                sessions.add_metric([replica], count)
        yield sessions
        age = GaugeMetricFamily(f"{PREFIX}checkpoint_age_seconds",
                                "Seconds since the last session checkpoint was written (0 before the first)")
        age.add_metric([], 0.0 if self._last_checkpoint is None else time.time() - self._last_checkpoint)
        yield age
