"""dashboards/prometheus: promtool accepts the configuration and the rules, the rules' unit tests
(alerts_test.yml) pass, and the jobs the alerts name are the jobs the configuration scrapes."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from tests.deploy.prometheus_stack import ALERT_RULES, PROMETHEUS_DIR

RULE_TESTS = Path(__file__).with_name("alerts_test.yml")
EXPECTED_ALERTS = {"EdgeDown", "ThroughputCollapse", "TrafficSpike", "StudentNotUpdated", "ServerDown", "ServerErrors",
                   "TeacherNotReady", "EdgeSeriesCapReached"}


def test_promtool_accepts_the_configuration(run_tool) -> None:
    result = run_tool("promtool", "check", "config", str(PROMETHEUS_DIR / "prometheus.yml"))
    assert result.returncode == 0, result.stdout + result.stderr


def test_promtool_accepts_the_rules(run_tool) -> None:
    result = run_tool("promtool", "check", "rules", str(ALERT_RULES))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_alerts_fire_when_and_only_when_they_should(run_tool) -> None:
    result = run_tool("promtool", "test", "rules", RULE_TESTS.name, cwd=RULE_TESTS.parent)
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_alert_is_unit_tested() -> None:
    rules = yaml.safe_load(ALERT_RULES.read_text())["groups"]
    alerts = {rule["alert"] for group in rules for rule in group["rules"] if "alert" in rule}
    assert alerts == EXPECTED_ALERTS
    tested = {t["alertname"] for group in yaml.safe_load(RULE_TESTS.read_text())["tests"]
              for t in group.get("alert_rule_test", []) if t["exp_alerts"]}
    assert tested == alerts


def test_the_alerts_name_jobs_that_are_scraped() -> None:
    config = yaml.safe_load((PROMETHEUS_DIR / "prometheus.yml").read_text())
    jobs = {job["job_name"] for job in config["scrape_configs"]}
    named = set(re.findall(r'job="([^"]+)"', ALERT_RULES.read_text()))
    assert named and named <= jobs
    rule_files = [PROMETHEUS_DIR / f for f in config["rule_files"]]
    assert rule_files == [ALERT_RULES]
