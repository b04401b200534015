"""Helpers of the deployment tests, importable as ``tests.deploy.prometheus_stack``: repository
paths, external tools, the metric names the server and the edge agent export, the PromQL of the
dashboard and the alert rules as Grafana and Prometheus run it, a real Prometheus on loopback, and
the checks of that PromQL against it.

:class:`PrometheusServer` runs Debian's ``prometheus`` binary with a generated configuration on a
free port (fixture ``start_prometheus`` in conftest.py). Two tests scrape exporters with it and run
:func:`wait_for_fleet_queries`: test_promql_live.py (stand-in exporters) and test_live_fleet.py
(the real server and edge agent processes).
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

REPO_ROOT = Path(__file__).resolve().parents[2]
PROMETHEUS_DIR = REPO_ROOT / "dashboards" / "prometheus"
ALERT_RULES = PROMETHEUS_DIR / "alerts.yml"
GRAFANA_DIR = REPO_ROOT / "dashboards" / "grafana"
FLEET_DASHBOARD = GRAFANA_DIR / "dashboards" / "shadowtutor-fleet.json"
INSTALL_HINT = "install it with .ci/install-system-deps.sh (Debian packages) or pip install -e .[dev]"

# Values that Grafana puts in for its built-in interval variables when it sends a query.
GRAFANA_INTERVALS = {"__rate_interval": "1m", "__interval": "15s", "__range": "1h"}


def find_tool(name: str) -> str | None:
    """An executable from the virtual environment running the tests (pip-installed tools), else PATH."""
    beside_python = Path(sys.executable).parent / name
    if beside_python.is_file() and os.access(beside_python, os.X_OK):
        return str(beside_python)
    return shutil.which(name)


# -- the metrics the server and the edge agent export (the names the dashboards may use) ---------


@dataclass(frozen=True)
class MetricSpec:
    name: str
    kind: str  # counter, gauge or histogram
    labels: tuple[str, ...] = ()


SERVER_METRICS = (
    MetricSpec("shadowtutor_server_sessions", "gauge"),
    MetricSpec("shadowtutor_server_key_frames_total", "counter", ("mode",)),
    MetricSpec("shadowtutor_server_teacher_latency_seconds", "histogram"),
    MetricSpec("shadowtutor_server_distill_latency_seconds", "histogram"),
    MetricSpec("shadowtutor_server_distill_steps_total", "counter"),
    MetricSpec("shadowtutor_server_received_bytes_total", "counter"),
    MetricSpec("shadowtutor_server_sent_bytes_total", "counter"),
    MetricSpec("shadowtutor_server_errors_total", "counter", ("code",)),
    MetricSpec("shadowtutor_server_teacher_ready", "gauge"),
    MetricSpec("shadowtutor_server_teacher_queue_depth", "gauge"),
    MetricSpec("shadowtutor_server_teacher_batch_size", "histogram"),
    MetricSpec("shadowtutor_server_engine_batch_size", "histogram"),
    MetricSpec("shadowtutor_server_engine_batch_limit", "gauge"),
    MetricSpec("shadowtutor_server_engine_batches_running", "gauge"),
    MetricSpec("shadowtutor_server_engine_queue_wait_seconds", "histogram"),
    MetricSpec("shadowtutor_server_gpu_busy_ratio", "gauge"),
    MetricSpec("shadowtutor_server_gpu_memory_used_bytes", "gauge"),
    MetricSpec("shadowtutor_server_tokens_file_valid", "gauge"),
    MetricSpec("shadowtutor_server_unauthenticated_connections", "gauge"),
    MetricSpec("shadowtutor_server_connections_refused_total", "counter", ("reason",)),
    MetricSpec("shadowtutor_server_build_info", "gauge", ("version", "python")),
    MetricSpec("shadowtutor_server_fleet_edges", "gauge"),
    MetricSpec("shadowtutor_server_fleet_overflow_total", "counter"),
    MetricSpec("shadowtutor_server_edge_input_dropped_total", "counter", ("kind",)),
    # the Ray Serve ingress only (shadowtutor serve --ray): services/ray_serve/metrics.py
    MetricSpec("shadowtutor_server_teaching_replica_sessions", "gauge", ("replica",)),
    MetricSpec("shadowtutor_server_session_moves_total", "counter"),
    MetricSpec("shadowtutor_server_teaching_retries_total", "counter"),
    MetricSpec("shadowtutor_server_checkpoint_seconds", "histogram"),
    MetricSpec("shadowtutor_server_checkpoint_bytes", "histogram"),
    MetricSpec("shadowtutor_server_checkpoint_age_seconds", "gauge"),
)
# What an edge reports in TELEMETRY; the server exports it per edge as shadowtutor_server_edge_<name>
# and the edge's own exporter as shadowtutor_edge_<name>, labelled edge_id and the labels given.
REPORTED = (
    ("frames_total", "counter", ()),
    ("key_frames_total", "counter", ()),
    ("sent_bytes_total", "counter", ()),
    ("received_bytes_total", "counter", ()),
    ("waited_seconds_total", "counter", ()),
    ("stride", "gauge", ()),
    ("student_metric", "gauge", ()),
    ("weights_version", "gauge", ()),
    ("last_update_timestamp_seconds", "gauge", ()),
    ("inference_seconds", "histogram", ()),
    ("blocked_seconds", "histogram", ()),
    ("update_roundtrip_seconds", "histogram", ()),
    ("updates_applied_total", "counter", ()),
    ("resyncs_total", "counter", ()),
    ("reconnects_total", "counter", ()),
    ("key_frames_dropped_total", "counter", ()),  # offline
    ("output_dropped_total", "counter", ("output",)),  # disk full
    ("labels_removed_total", "counter", ()),
    ("change_based_frames_total", "counter", ("mode",)),  # --change-based
    ("changed_fraction", "gauge", ("layer",)),
    ("regions_total", "counter", ("path",)),  # --flow-path
    ("region_key_age_frames", "histogram", ()),
    ("cluster_workers", "gauge", ()),  # --cluster
    ("region_queue_depth", "gauge", ()),
    ("key_frames_deferred_total", "counter", ()),  # --uplink-budget, --downlink-budget
    ("uplink_budget_bps", "gauge", ()),
    ("downlink_budget_bps", "gauge", ()),
)
SERVER_EDGE_METRICS = tuple(
    MetricSpec(f"shadowtutor_server_edge_{name}", kind, ("edge_id", *labels))
    for name, kind, labels in (*REPORTED, ("connected", "gauge", ()), ("sessions_total", "counter", ()),
                               ("last_report_timestamp_seconds", "gauge", ()),
                               # the server's own, where it gates the edge's updates
                               ("update_budget_bps", "gauge", ()), ("answered_bps", "gauge", ()),
                               ("updates_held_back_total", "counter", ()))
) + (MetricSpec("shadowtutor_server_edge_info", "gauge", ("edge_id", "mode", "agent")),)
EDGE_METRICS = tuple(
    MetricSpec(f"shadowtutor_edge_{name}", kind, ("edge_id", *labels))
    for name, kind, labels in (*REPORTED, ("connected", "gauge", ()))
) + (
    MetricSpec("shadowtutor_edge_build_info", "gauge", ("edge_id", "version", "python")),
    # the edge's own: an acceleration's trial against the plain student (not reported to the server)
    MetricSpec("shadowtutor_edge_acceleration_speedup", "gauge", ("edge_id",)),
    MetricSpec("shadowtutor_edge_acceleration_stepped_aside", "gauge", ("edge_id",)),
    # the edge's own: of its reconnects, those that resumed their session (not reported)
    MetricSpec("shadowtutor_edge_resumed_reconnects_total", "counter", ("edge_id",)),
)


def series_names(specs: Sequence[MetricSpec]) -> set[str]:
    """The series names Prometheus stores for these metrics (histograms as _bucket/_sum/_count)."""
    names = set()
    for spec in specs:
        suffixes = ("_bucket", "_sum", "_count") if spec.kind == "histogram" else ("",)
        names.update(spec.name + suffix for suffix in suffixes)
    return names


def referenced_metrics(expr: str) -> set[str]:
    """Names of ShadowTutor series (and recording rules over them) that a PromQL expression reads."""
    return set(re.findall(r"\b(?:\w+:)?shadowtutor_[\w:]+", expr))


# -- PromQL in the repository -------------------------------------------------------------------


@dataclass(frozen=True)
class Query:
    """One PromQL expression and where it was found (for messages)."""

    origin: str
    expr: str


def grafana_to_promql(expr: str, variables: dict[str, str]) -> str:
    """The query Grafana would send: template variables replaced by their values.

    ``variables`` maps a dashboard variable to the value used (its "All" value); Grafana's own
    interval variables get :data:`GRAFANA_INTERVALS`. A variable left over is an error.
    """
    values = {**GRAFANA_INTERVALS, **variables}

    def value_of(match: re.Match) -> str:
        name = next(g for g in match.groups() if g)
        if name not in values:
            raise ValueError(f"unknown template variable {name!r} in {expr!r}")
        return values[name]

    return re.sub(r"\$\{(\w+)(?::\w+)?\}|\[\[(\w+)\]\]|\$(\w+)", value_of, expr)


def label_values_to_promql(definition: str) -> tuple[str, str]:
    """``label_values(metric, label)`` (Grafana's variable query) as PromQL, and the label."""
    match = re.fullmatch(r"\s*label_values\((?:(.+),\s*)?(\w+)\s*\)\s*", definition)
    if match is None:
        raise ValueError(f"not a label_values() query: {definition!r}")
    label = match.group(2)
    selector = match.group(1) or f'{{{label}!=""}}'
    return f"group by ({label}) ({selector})", label


def _panels(panels: list[dict]) -> Iterator[dict]:
    for panel in panels:
        yield panel
        yield from _panels(panel.get("panels", []))


def dashboard_queries(path: Path = FLEET_DASHBOARD) -> list[Query]:
    """Every panel query and query variable of a Grafana dashboard, as the PromQL Grafana sends."""
    dashboard = json.loads(path.read_text())
    variables = dashboard.get("templating", {}).get("list", [])
    values = {v["name"]: v.get("allValue") or ".*" for v in variables}
    queries = []
    for variable in variables:
        if variable.get("type") == "query":
            definition = variable.get("definition") or variable["query"]["query"]
            expr, _ = label_values_to_promql(definition)
            queries.append(Query(f"{path.name}: variable {variable['name']}", expr))
    for panel in _panels(dashboard["panels"]):
        for target in panel.get("targets", []):
            if target.get("expr"):
                origin = f"{path.name}: panel {panel['title']!r} query {target['refId']}"
                queries.append(Query(origin, grafana_to_promql(target["expr"], values)))
    return queries


def rule_queries(path: Path = ALERT_RULES) -> list[Query]:
    """The expression of every recording and alerting rule in a Prometheus rules file."""
    queries = []
    for group in yaml.safe_load(path.read_text())["groups"]:
        for rule in group["rules"]:
            name = rule.get("alert") or rule["record"]
            queries.append(Query(f"{path.name}: {group['name']}/{name}", rule["expr"]))
    return queries


# -- a real Prometheus --------------------------------------------------------------------------


class PrometheusError(RuntimeError):
    """Prometheus failed to start, or answered an API call with an error."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def scrape_job(name: str, targets: Sequence[str], interval: str = "1s") -> dict[str, Any]:
    """A static scrape configuration for ``start_prometheus``."""
    return {"job_name": name, "scrape_interval": interval, "static_configs": [{"targets": list(targets)}]}


# The job names of dashboards/prometheus/prometheus.yml; the alert rules select on them.
SERVER_JOB = "shadowtutor-server"
EDGE_JOB = "shadowtutor-edge"


def fleet_scrape_jobs(server_target: str, edge_targets: Sequence[str]) -> list[dict[str, Any]]:
    """The stack's two scrape jobs, with static ``HOST:PORT`` targets, scraped every second."""
    return [scrape_job(SERVER_JOB, [server_target]), scrape_job(EDGE_JOB, edge_targets)]


class PrometheusServer:
    """A ``prometheus`` process on a free loopback port with its own configuration and storage."""

    def __init__(
        self,
        binary: str,
        workdir: Path,
        scrape_configs: Sequence[dict],
        rule_files: Sequence[Path] = (),
        evaluation_interval: str = "1s",
    ) -> None:
        self.binary = binary
        self.workdir = workdir
        self.config = {
            "global": {"scrape_interval": "1s", "evaluation_interval": evaluation_interval},
            "rule_files": [str(p) for p in rule_files],
            "scrape_configs": list(scrape_configs),
        }
        self.port = 0
        self._process: subprocess.Popen | None = None
        self._log = workdir / "prometheus.log"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 30) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        config_path = self.workdir / "prometheus.yml"
        config_path.write_text(yaml.safe_dump(self.config))
        self.port = free_port()
        argv = [
            self.binary,
            f"--config.file={config_path}",
            f"--storage.tsdb.path={self.workdir / 'data'}",
            f"--web.listen-address=127.0.0.1:{self.port}",
            "--log.level=warn",
        ]
        with self._log.open("w") as log:
            self._process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
        self.wait_for(self._ready, timeout, "Prometheus to become ready")

    def stop(self) -> None:
        if self._process is None:
            return
        self._process.terminate()
        try:
            self._process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        self._process = None

    def log_tail(self, lines: int = 20) -> str:
        return "\n".join(self._log.read_text().splitlines()[-lines:]) if self._log.exists() else ""

    def _ready(self) -> bool:
        if self._process is not None and self._process.poll() is not None:
            raise PrometheusError(f"prometheus exited with {self._process.returncode}:\n{self.log_tail()}")
        try:
            with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as response:
                return response.status == 200
        except (urllib.error.URLError, ConnectionError):
            return False

    def wait_for(self, condition: Callable[[], Any], timeout: float, what: str) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            result = condition()
            if result:
                return result
            if time.monotonic() > deadline:
                raise PrometheusError(f"timed out after {timeout:.0f} s waiting for {what}\n{self.log_tail()}")
            time.sleep(0.2)

    def api(self, path: str, **params: str) -> Any:
        """``GET /api/v1/<path>``; the ``data`` of a success, else :class:`PrometheusError`."""
        url = f"{self.url}/api/v1/{path}?{urllib.parse.urlencode(params)}"
        try:
            with urllib.request.urlopen(url, timeout=10) as response:
                body = json.load(response)
        except urllib.error.HTTPError as exc:  # 400/422/503 still carry Prometheus' JSON error
            body = json.load(exc)
        if body.get("status") != "success":
            raise PrometheusError(f"{body.get('errorType')}: {body.get('error')}")
        return body["data"]

    def query(self, expr: str) -> list[dict]:
        """The instant vector (or scalar, as one sample) of ``expr`` now."""
        data = self.api("query", query=expr)
        return data["result"] if data["resultType"] in ("vector", "matrix") else [{"value": data["result"]}]

    def metric_names(self) -> set[str]:
        """Names of every series stored (scraped or recorded by a rule)."""
        return set(self.api("label/__name__/values"))

    def wait_for_scrapes(self, count: int, timeout: float = 30) -> None:
        """Until every target is up and has been scraped successfully ``count`` times (enough for rate())."""

        def scraped() -> bool:
            targets = self.api("targets", state="active")["activeTargets"]
            if not targets or any(t["health"] != "up" for t in targets):
                return False
            # up is 1 for a successful scrape, 0 for a failed one. Keyed by target: storage reused
            # from an earlier run may hold other targets' series.
            counts = {
                (s["metric"]["job"], s["metric"]["instance"]): float(s["value"][1])
                for s in self.query("sum_over_time(up[5m])")
            }
            return all(counts.get((t["labels"]["job"], t["labels"]["instance"]), 0) >= count for t in targets)

        self.wait_for(scraped, timeout, f"{count} successful scrapes of every target")

    def rules(self) -> list[dict]:
        """Every recording and alerting rule loaded, with its health and last evaluation."""
        return [rule for group in self.api("rules")["groups"] for rule in group["rules"]]

    def wait_for_rule_evaluations(self, timeout: float = 30) -> list[dict]:
        """Until every rule has been evaluated at least once; the rules with their health."""

        def evaluated() -> list[dict] | None:
            rules = self.rules()
            done = rules and all(not r["lastEvaluation"].startswith("0001-") for r in rules)
            return rules if done else None

        return self.wait_for(evaluated, timeout, "a first evaluation of every rule")


# -- the dashboard's and the rules' PromQL on a Prometheus --------------------------------------


def _has_number(result: list[dict]) -> bool:
    return any(math.isfinite(float(sample["value"][1])) for sample in result)


def query_problems(
    prom: PrometheusServer, queries: Sequence[Query], known: set[str] | None, need_value: bool
) -> list[str]:
    """What is wrong with ``queries`` on ``prom`` now: API errors, series names that ``known`` lacks
    (None: not checked), and, where ``need_value``, results without a single finite number (a panel
    with no data)."""
    problems = []
    for q in queries:
        unknown = referenced_metrics(q.expr) - known if known is not None else set()
        if unknown:
            problems.append(f"{q.origin}: no series named {sorted(unknown)}")
        try:
            result = prom.query(q.expr)
        except PrometheusError as exc:
            problems.append(f"{q.origin}: {exc}\n    {q.expr}")
            continue
        if need_value and not _has_number(result):
            problems.append(f"{q.origin}: no finite value in {result}\n    {q.expr}")
    return problems


def fleet_problems(
    prom: PrometheusServer, dashboard: Sequence[Query], rules: Sequence[Query], features_off: Sequence[Query] = ()
) -> list[str]:
    """What is wrong now: unhealthy rules, dashboard queries without a value, rule expressions that
    fail or read series Prometheus does not have, and ``features_off`` queries (dashboard panels of
    features the fleet does not run: their series do not exist) that fail.

    An alert's expression is empty while all is well, so a rule only has to evaluate without error
    and read existing series; alerts_test.yml checks when each alert fires.
    """
    problems = [f"rule {r['name']}: {r['health']}: {r.get('lastError')}" for r in prom.rules() if r["health"] != "ok"]
    known = prom.metric_names()
    return (
        problems
        + query_problems(prom, dashboard, known, need_value=True)
        + query_problems(prom, rules, known, need_value=False)
        + query_problems(prom, features_off, None, need_value=False)
    )


def panels_apart(queries: Sequence[Query], titles: Sequence[str]) -> tuple[list[Query], list[Query]]:
    """``queries`` split into those of panels other than ``titles`` and those of the panels ``titles``."""
    inside = [q for q in queries if any(f"panel {title!r} " in q.origin for title in titles)]
    return [q for q in queries if q not in inside], inside


def wait_for_fleet_queries(
    prom: PrometheusServer, dashboard: Sequence[Query], rules: Sequence[Query], timeout: float = 30,
    features_off: Sequence[Query] = (),
) -> list[str]:
    """:func:`fleet_problems` after every rule has been evaluated, again until there are none or
    ``timeout`` seconds have passed; the problems left (empty on success)."""
    deadline = time.monotonic() + timeout
    prom.wait_for_rule_evaluations(timeout)
    while True:
        problems = fleet_problems(prom, dashboard, rules, features_off)
        if not problems or time.monotonic() > deadline:
            return problems
        time.sleep(0.5)


def single_value(prom: PrometheusServer, queries: Sequence[Query], origin_part: str) -> float:
    """The one sample of the one query whose origin contains ``origin_part``."""
    (query,) = [q for q in queries if origin_part in q.origin]
    (sample,) = prom.query(query.expr)
    return float(sample["value"][1])
