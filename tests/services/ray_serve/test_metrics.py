"""TeachingMetrics: ``teaching_replica_sessions`` counts live sessions only (an edge that left stops
counting at once), a replica reported lost leaves the series at once, and a replica silent for
``forget_after`` seconds leaves it too. No Ray needed: the collector is fed answers directly."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry

from services.ray_serve.metrics import TeachingMetrics
from services.ray_serve.requests import Answer
from shadowtutor.protocol.messages import Error


def _answer(replica: str, moved: bool = False) -> Answer:
    return Answer(message=Error(code="internal", message=""), replica=replica, sessions=99, moved=moved)


def _sessions(registry: CollectorRegistry) -> dict[str, float]:
    (family,) = [f for f in registry.collect() if f.name.endswith("teaching_replica_sessions")]
    return {sample.labels["replica"]: sample.value for sample in family.samples}


@pytest.fixture
def live() -> set[str]:
    return {"a", "b", "c"}


@pytest.fixture
def registry(live: set[str]) -> tuple[CollectorRegistry, TeachingMetrics]:
    registry = CollectorRegistry()
    return registry, TeachingMetrics(registry, lambda: live)


def test_counts_live_sessions_per_replica_not_what_the_replica_holds(registry, live: set[str]) -> None:
    reg, metrics = registry
    for edge, replica in (("a", "r1:1"), ("b", "r1:1"), ("c", "r2:2")):
        metrics.record(_answer(replica), edge)
    assert _sessions(reg) == {"r1:1": 2, "r2:2": 1}
    live.discard("b")
    assert _sessions(reg) == {"r1:1": 1, "r2:2": 1}


def test_a_moved_session_counts_on_its_new_replica(registry) -> None:
    reg, metrics = registry
    metrics.record(_answer("r1:1"), "a")
    metrics.record(_answer("r2:2", moved=True), "a")
    assert _sessions(reg) == {"r1:1": 0, "r2:2": 1}


def test_a_lost_replica_leaves_the_series_at_once(registry) -> None:
    reg, metrics = registry
    metrics.record(_answer("r1:1"), "a")
    metrics.record(_answer("r1:1"), "b")
    metrics.record(_answer("r2:2"), "c")
    assert metrics.lost("a") == "r1:1"
    assert _sessions(reg) == {"r2:2": 1}
    metrics.record(_answer("r2:2", moved=True), "a")
    assert _sessions(reg) == {"r2:2": 2}
    assert metrics.lost("unknown-edge") is None


def test_a_silent_replica_is_forgotten(live: set[str]) -> None:
    reg = CollectorRegistry()
    metrics = TeachingMetrics(reg, lambda: live, forget_after=0.0)
    metrics.record(_answer("r1:1"), "a")
    assert _sessions(reg) == {}
