"""Issues 3 and 11 acceptance, live: a real Prometheus (Debian's package) with the repository's alert
rules scrapes the real server (``shadowtutor serve``, uvicorn) on loopback every second, and no
edge, while a real edge agent (``shadowtutor edge``) labels a generated scene and reports its
figures to the server over its WebSocket (TELEMETRY every second). Every PromQL expression of the
Grafana fleet dashboard then has a value, from the server's per-edge series, every rule is healthy
and reads series that exist, and ``promtool check metrics`` accepts both ``/metrics`` texts (the
agent still serves its own, for whoever pulls it).

The checks are those of the stand-in test (test_promql_live.py), from prometheus_stack.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from shadowtutor_lab.demo.processes import (
    LOOPBACK,
    ManagedProcess,
    free_port,
    shadowtutor_command,
    start_process,
    wait_http_ok,
)
from shadowtutor_lab.scenes.cache import cached_scene
from tests.deploy.prometheus_stack import (
    ALERT_RULES,
    fleet_scrape_jobs,
    panels_apart,
    single_value,
    wait_for_fleet_queries,
)
from tests.support.prometheus import promtool_check

pytestmark = pytest.mark.slow

SCENE_FRAMES = 240
EDGE_MAX_FPS = 8  # the run lasts at least 30 s: the agent is still labelling while Prometheus is checked
EDGE_ID = "live-edge"
ENV = {"OMP_NUM_THREADS": "1"}  # three processes and Prometheus share two cores
# The edge runs the flow path without a cluster, and change-based inference excludes the flow path:
# these panels have no series (their queries must still evaluate). The distillation engine's histograms
# may have no observations on this CPU server (their quantiles are then NaN, not a number). The Ray Serve
# panels read the ingress of `serve --ray`, not this single-process server.
PANELS_OF_FEATURES_OFF = ("Change-based inference", "Edge cluster", "Engine batch size", "Engine queue wait",
                          "Sessions per teaching replica", "Session moves and retries", "Session checkpoints")
# the server gates the edge's updates, so that the gating panel has values too
SERVER_FLAGS = ("--teacher", "labels", "--device", "cpu", "--max-updates", "2", "--log-level", "warning",
                "--edge-report-interval", "1", "--update-gating")


@dataclass(frozen=True)
class Fleet:
    server: ManagedProcess
    edge: ManagedProcess
    server_target: str  # HOST:PORT serving /metrics
    edge_target: str
    edge_out: Path

    def describe(self) -> str:
        return f"{self.server.describe()}\n{self.edge.describe()}"


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[Fleet]:
    """The server and one edge agent, both serving /metrics; the agent is labelling frames."""
    scene = cached_scene("fixed-street", SCENE_FRAMES, 3, (320, 180), 30, tmp_path / "scenes", progress=False)
    logs = tmp_path / "logs"
    port, metrics_port = free_port(), free_port()
    serve = shadowtutor_command("serve", "--host", LOOPBACK, "--port", str(port), "--labels-dir", str(scene),
                                *SERVER_FLAGS)
    with start_process(serve, name="server", log_dir=logs, env=ENV) as server:
        wait_http_ok(f"http://{LOOPBACK}:{port}/readyz", timeout=90, process=server)
        edge_out = tmp_path / EDGE_ID
        edge_args = shadowtutor_command(
            "edge", "--server", f"ws://{LOOPBACK}:{port}/v1/edge", "--source", str(scene / "video.mp4"),
            "--edge-id", EDGE_ID, "--max-fps", str(EDGE_MAX_FPS), "--output-dir", str(edge_out),
            "--no-save-labels", "--no-overlay", "--metrics-host", LOOPBACK, "--metrics-port", str(metrics_port),
            "--linger", "60", "--flow-path",  # the flow path on, so that its panels have values too
            # a byte budget too large to hold anything back, so that the budget's series exist
            "--uplink-budget", "100Mbps", "--downlink-budget", "100Mbps",
        )
        with start_process(edge_args, name="edge", log_dir=logs, env=ENV) as edge:
            wait_http_ok(f"http://{LOOPBACK}:{metrics_port}/metrics", timeout=90, process=edge)
            yield Fleet(server, edge, f"{LOOPBACK}:{port}", f"{LOOPBACK}:{metrics_port}", edge_out)


def test_the_fleet_seen_through_the_server_alone(
    start_prometheus, fleet, fleet_dashboard_queries, alert_rule_queries
) -> None:
    prom = start_prometheus(fleet_scrape_jobs(fleet.server_target, []), rule_files=[ALERT_RULES])
    prom.wait_for_scrapes(5, timeout=30)
    shown, features_off = panels_apart(fleet_dashboard_queries, PANELS_OF_FEATURES_OFF)
    assert features_off
    problems = wait_for_fleet_queries(prom, shown, alert_rule_queries, timeout=40, features_off=features_off)
    assert not problems, "\n".join(problems) + "\n" + fleet.describe()

    assert single_value(prom, fleet_dashboard_queries, "panel 'Teacher'") == 1
    assert single_value(prom, fleet_dashboard_queries, "panel 'Server sessions'") == 1
    assert single_value(prom, fleet_dashboard_queries, "panel 'Edges connected'") == 1
    assert single_value(prom, fleet_dashboard_queries, "panel 'Fleet FPS'") > 0
    assert 0 < single_value(prom, fleet_dashboard_queries, "panel 'Fleet key-frame ratio'") <= 1
    assert 0 < single_value(prom, fleet_dashboard_queries, "panel 'Mean student metric'") <= 1
    assert single_value(prom, fleet_dashboard_queries, "panel 'Mean key age'") >= 0  # the flow path, reported
    assert single_value(prom, fleet_dashboard_queries, "panel 'GPU busy'") == 0  # a CPU server
    mean_teacher_batch = single_value(prom, fleet_dashboard_queries, "panel 'Teacher batch size' query C")
    assert mean_teacher_batch == pytest.approx(1)  # one edge: one key frame at a time
    assert not prom.query("shadowtutor_server_edge_change_based_frames_total")  # off: absent, not 0
    (edge,) = prom.query("shadowtutor_server_edge_frames_total")
    assert edge["metric"]["edge_id"] == EDGE_ID and edge["metric"]["job"] == "shadowtutor-server"
    assert not prom.query('{job="shadowtutor-edge"}')  # nothing came from the edge itself
    # The values above were scraped from a session in progress only if the run has not ended yet
    # (the agent writes its summary after closing the session).
    assert fleet.edge.alive() and not (fleet.edge_out / "summary.json").exists(), (
        f"the agent finished before the checks; lengthen the scene\n{fleet.describe()}"
    )

    for target in (fleet.server_target, fleet.edge_target):
        promtool_check(wait_http_ok(f"http://{target}/metrics", timeout=10).decode())
