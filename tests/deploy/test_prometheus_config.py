"""dashboards/prometheus and dashboards/alertmanager: promtool accepts the configuration and the rules,
the rules' unit tests (alerts_test.yml) pass, the jobs the alerts name are the jobs the configuration
scrapes, every alert links its runbook in docs/deploy/metrics.md, and amtool accepts the Alertmanager
configuration, with its documented receiver integrations switched on too."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from tests.deploy.markdown_docs import anchors
from tests.deploy.prometheus_stack import ALERT_RULES, PROMETHEUS_DIR, REPO_ROOT

ALERTMANAGER_CONFIG = REPO_ROOT / "dashboards" / "alertmanager" / "alertmanager.yml"
RULE_TESTS = Path(__file__).with_name("alerts_test.yml")
EXPECTED_ALERTS = {"EdgeDown", "ThroughputCollapse", "TrafficSpike", "StudentNotUpdated", "ServerDown", "ServerErrors",
                   "TeacherNotReady", "EdgeSeriesCapReached", "EdgeOutputWritesDropped", "TokensFileRejected"}


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


def test_every_alert_links_its_runbook_section_in_the_metrics_page() -> None:
    runbooks = REPO_ROOT / "docs" / "deploy" / "metrics.md"
    sections = anchors(runbooks)
    rules = [rule for group in yaml.safe_load(ALERT_RULES.read_text())["groups"] for rule in group["rules"]]
    for rule in rules:
        if "alert" in rule:
            page, _, anchor = rule["annotations"]["runbook_url"].partition("#")
            assert page == "docs/deploy/metrics.md" and anchor in sections, rule["alert"]


def test_alertmanager_accepts_its_configuration(run_tool) -> None:
    result = run_tool("amtool", "check-config", str(ALERTMANAGER_CONFIG))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 receivers" in result.stdout


def test_the_documented_receiver_integrations_are_valid(run_tool, tmp_path: Path) -> None:
    """The configuration with its commented-out examples (webhook, e-mail, Slack) switched on."""
    lines = ALERTMANAGER_CONFIG.read_text().splitlines()
    start = lines.index("receivers:")
    body = [line.replace("    # ", "    ", 1) for line in lines[start:] if not re.match(r"    # [A-Z]", line)]
    enabled = tmp_path / "alertmanager.yml"
    enabled.write_text("\n".join(lines[:start] + body) + "\n")
    result = run_tool("amtool", "check-config", str(enabled))
    assert result.returncode == 0, result.stdout + result.stderr
    receiver = yaml.safe_load(enabled.read_text())["receivers"][0]
    assert {"webhook_configs", "email_configs", "slack_configs"} <= set(receiver)
