"""Fixtures of the deployment tests: external tools (skipped with a reason where absent), the
PromQL of the dashboard and the alert rules, and ``start_prometheus`` (a real Prometheus)."""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest

from tests.deploy.prometheus_stack import (
    ALERT_RULES,
    FLEET_DASHBOARD,
    INSTALL_HINT,
    REPO_ROOT,
    PrometheusServer,
    Query,
    dashboard_queries,
    find_tool,
    rule_queries,
)


def require_tool(name: str) -> str:
    path = find_tool(name)
    if path is None:
        pytest.skip(f"{name} is not installed; {INSTALL_HINT}")
    return path


@pytest.fixture
def run_tool() -> Callable[..., subprocess.CompletedProcess]:
    """``run_tool(name, *args, cwd=REPO_ROOT)``: run an external tool, skipping the test where it is absent."""

    def run(name: str, *args: str, cwd: Path = REPO_ROOT, timeout: float = 60) -> subprocess.CompletedProcess:
        argv = [require_tool(name), *args]
        return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False)

    return run


@pytest.fixture
def fleet_dashboard_queries() -> list[Query]:
    return dashboard_queries(FLEET_DASHBOARD)


@pytest.fixture
def alert_rule_queries() -> list[Query]:
    return rule_queries(ALERT_RULES)


@pytest.fixture
def prometheus_binary() -> str:
    return require_tool("prometheus")


@pytest.fixture
def start_prometheus(prometheus_binary: str, tmp_path: Path) -> Iterator[Callable[..., PrometheusServer]]:
    """``start_prometheus(scrape_configs, rule_files=())``: a started :class:`PrometheusServer`,
    stopped at the end of the test."""
    started: list[PrometheusServer] = []

    def start(scrape_configs: Sequence[dict], rule_files: Sequence[Path] = ()) -> PrometheusServer:
        workdir = tmp_path / f"prometheus-{len(started)}"
        server = PrometheusServer(prometheus_binary, workdir, scrape_configs, rule_files)
        started.append(server)
        server.start()
        return server

    yield start
    for server in started:
        server.stop()
