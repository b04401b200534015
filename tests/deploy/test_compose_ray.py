"""docker-compose.ray.yml on top of docker-compose.yml: the server as a Ray Serve application instead
of the single-process `server`, as Docker Compose resolves the two files (`docker-compose config`,
no engine needed). Only one service reserves the GPUs; the Ray service answers as `server` for the
edges and Prometheus; its session volume is a directory the image creates for uid 10001; Ray
advertises 127.0.0.1, runs without the dashboard and with token authentication."""

from __future__ import annotations

import json
import re
import subprocess

import pytest

from tests.deploy.prometheus_stack import REPO_ROOT

FILES = ("--file", str(REPO_ROOT / "docker-compose.yml"), "--file", str(REPO_ROOT / "docker-compose.ray.yml"))


def _config(run_tool, *profiles: str) -> dict:
    flags = [part for profile in profiles for part in ("--profile", profile)]
    result: subprocess.CompletedProcess = run_tool("docker-compose", *FILES, *flags, "config", "--format", "json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


@pytest.mark.parametrize("profiles", [(), ("edge",)])
def test_only_the_ray_service_reserves_gpus(run_tool, profiles: tuple[str, ...]) -> None:
    services = _config(run_tool, *profiles)["services"]
    assert "server" not in services and "ray" in services
    reserving = [name for name, s in services.items()
                 if s.get("deploy", {}).get("resources", {}).get("reservations", {}).get("devices")]
    assert reserving == ["ray"]


def test_edges_and_prometheus_reach_it_as_server(run_tool) -> None:
    services = _config(run_tool, "edge")["services"]
    ray = services["ray"]
    assert "server" in ray["networks"]["default"]["aliases"]
    assert services["edge"]["environment"]["SHADOWTUTOR_SERVER"] == "ws://server:8000/v1/edge"
    assert services["edge"]["depends_on"] == {"ray": {"condition": "service_healthy", "required": True}}
    assert set(services["prometheus"]["depends_on"]) == {"ray", "alertmanager"}
    assert [p["target"] for p in ray["ports"]] == [8000]


def test_ray_runs_with_tokens_and_no_dashboard(run_tool) -> None:
    ray = _config(run_tool)["services"]["ray"]
    (command,) = ray["command"]
    start = command[command.index("ray start"):command.index("&& exec")]
    assert "--node-ip-address 127.0.0.1" in start and "--include-dashboard=false" in start
    assert "dashboard-host" not in start
    assert ray["environment"]["RAY_AUTH_MODE"] == "token"
    # A fresh token at every start, where RAY_AUTH_TOKEN_PATH says.
    assert 'token_hex(32))" > "$$RAY_AUTH_TOKEN_PATH"' in command


def test_the_session_volume_is_a_directory_the_image_gives_uid_10001(run_tool) -> None:
    config = _config(run_tool)
    ray = config["services"]["ray"]
    (command,) = ray["command"]
    store = command.split("--checkpoint-store ")[1].split()[0]
    (volume,) = [v for v in ray["volumes"] if v["target"] == store]
    assert volume["type"] == "volume" and not volume.get("read_only")
    # Docker fills a new named volume from the image's directory, its owner included.
    dockerfile = (REPO_ROOT / "Dockerfile.server").read_text()
    assert re.search(rf"mkdir -p [^\n]*{store}\b", dockerfile)
    assert re.search(rf'chown "\$\{{APP_UID\}}:\$\{{APP_UID\}}" [^\n]*{store}\b', dockerfile)
    assert re.search(r"ARG APP_UID=10001", dockerfile)


def test_the_ray_image_has_the_serve_extra(run_tool) -> None:
    import tomllib

    ray = _config(run_tool)["services"]["ray"]
    extras = ray["build"]["args"]["EXTRAS"].split(",")
    declared = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert "serve" in extras and set(extras) <= set(declared)
    assert ray["pull_policy"] == "build"
