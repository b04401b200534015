"""dashboards/grafana: the fleet dashboard is a well-formed Grafana dashboard on the provisioned
data source, filters every edge series by the edge_id variable, and reads only metrics that the
server and the edge agent export; the provisioning files point where docker-compose.yml mounts."""

from __future__ import annotations

import json
import re

import pytest
import yaml

from tests.deploy.prometheus_stack import (
    FLEET_DASHBOARD,
    GRAFANA_DIR,
    REPO_ROOT,
    SERVER_EDGE_METRICS,
    SERVER_METRICS,
    referenced_metrics,
    series_names,
)

PROVISIONING = GRAFANA_DIR / "provisioning"
RECORDED = re.compile(r"^\w+:")  # recording rules: not used by the dashboard, which must work without them


@pytest.fixture(scope="module")
def dashboard() -> dict:
    return json.loads(FLEET_DASHBOARD.read_text())


@pytest.fixture(scope="module")
def datasource() -> dict:
    (source,) = yaml.safe_load((PROVISIONING / "datasources" / "prometheus.yml").read_text())["datasources"]
    return source


def _panels(dashboard: dict) -> list[dict]:
    return [p for p in dashboard["panels"] if p["type"] != "row"]


def test_dashboard_identity_and_variable(dashboard: dict) -> None:
    assert dashboard["uid"] == "shadowtutor-fleet"
    assert dashboard["schemaVersion"] >= 39
    (variable,) = dashboard["templating"]["list"]
    assert variable["name"] == "edge_id" and variable["type"] == "query"
    assert variable["includeAll"] and variable["multi"] and variable["allValue"] == ".*"
    assert "shadowtutor_server_edge_" in variable["definition"]


def test_panels_are_unique_and_do_not_overlap(dashboard: dict) -> None:
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    cells: dict[tuple[int, int], str] = {}
    for panel in dashboard["panels"]:
        g = panel["gridPos"]
        assert 0 <= g["x"] and g["x"] + g["w"] <= 24, panel["title"]
        for x in range(g["x"], g["x"] + g["w"]):
            for y in range(g["y"], g["y"] + g["h"]):
                assert (x, y) not in cells, f"{panel['title']!r} overlaps {cells[(x, y)]!r}"
                cells[(x, y)] = panel["title"]


def test_every_query_uses_the_provisioned_data_source(dashboard: dict, datasource: dict) -> None:
    for panel in _panels(dashboard):
        assert panel["datasource"]["uid"] == datasource["uid"], panel["title"]
        refs = [t["refId"] for t in panel["targets"]]
        assert refs and len(refs) == len(set(refs)), panel["title"]
        assert all(t["datasource"]["uid"] == datasource["uid"] and t["expr"] for t in panel["targets"])
    assert dashboard["templating"]["list"][0]["datasource"]["uid"] == datasource["uid"]


def test_edge_series_follow_the_edge_variable(dashboard: dict) -> None:
    for panel in _panels(dashboard):
        for target in panel["targets"]:
            for selector in re.findall(r"shadowtutor_server_edge_\w+(\{[^}]*\})?", target["expr"]):
                assert 'edge_id=~"$edge_id"' in selector, f"{panel['title']!r}: {target['expr']}"


def test_queries_read_only_the_servers_metrics(dashboard: dict) -> None:
    """The dashboard works with no edge scraped: edges are seen through the server's per-edge series."""
    exported = series_names(SERVER_METRICS + SERVER_EDGE_METRICS)
    for panel in _panels(dashboard):
        for target in panel["targets"]:
            used = referenced_metrics(target["expr"])
            assert used and not {m for m in used if RECORDED.match(m)}, target["expr"]
            assert used <= exported, f"{panel['title']!r}: {sorted(used - exported)}"


def test_provisioning_matches_the_compose_mounts(datasource: dict) -> None:
    compose = yaml.safe_load((REPO_ROOT / "docker-compose.yml").read_text())
    mounts = dict(v.split(":")[:2] for v in compose["services"]["grafana"]["volumes"] if v.startswith("./"))
    assert mounts["./dashboards/grafana/provisioning"] == "/etc/grafana/provisioning"
    (provider,) = yaml.safe_load((PROVISIONING / "dashboards" / "shadowtutor.yml").read_text())["providers"]
    assert mounts["./dashboards/grafana/dashboards"] == provider["options"]["path"]
    home = compose["services"]["grafana"]["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
    assert home == f"{provider['options']['path']}/{FLEET_DASHBOARD.name}"
    assert datasource["url"] == "http://prometheus:9090" and "prometheus" in compose["services"]

