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


RAY_TLS_TOKENS = ("--file", str(REPO_ROOT / "deploy" / "compose" / "tls-tokens.ray.yml"))
SERVER_TLS_TOKENS = ("--file", str(REPO_ROOT / "deploy" / "compose" / "tls-tokens.yml"))


def _env_of(config: dict, service: str) -> dict:
    return config["services"][service]["environment"]


def test_ray_carries_the_single_process_servers_settings_and_limits(run_tool) -> None:
    # With the profile that switches `server` back on, both services resolve side by side.
    config = _config(run_tool, "single-process")
    server, ray = _env_of(config, "server"), _env_of(config, "ray")
    assert {k: v for k, v in server.items() if k not in ray} == {}
    assert {k: ray[k] for k in server} == server


def test_ray_checkpoints_are_tagged_with_a_compose_secret(run_tool) -> None:
    config = _config(run_tool)
    ray = config["services"]["ray"]
    (secret,) = [s for s in ray["secrets"] if s["source"] == "checkpoint_secret"]
    assert _env_of(config, "ray")["SHADOWTUTOR_CHECKPOINT_SECRET_FILE"] == secret["target"]
    assert config["secrets"]["checkpoint_secret"]["file"].endswith("secrets/checkpoint_secret")
    (command,) = ray["command"]
    assert "--checkpoint-secret " not in command  # never on the command line (ps, the Serve config)


def test_the_ray_override_gives_ray_tls_and_tokens(run_tool, tmp_path) -> None:
    config = _config_with(run_tool, *FILES, *RAY_TLS_TOKENS)
    ray = config["services"]["ray"]
    env = ray["environment"]
    mounts = {v["target"]: v for v in ray["volumes"]}
    for variable in ("SHADOWTUTOR_TLS_CERT", "SHADOWTUTOR_TLS_KEY", "SHADOWTUTOR_TOKENS_FILE"):
        path = env[variable]
        (mount,) = [m for target, m in mounts.items() if path.startswith(target + "/")]
        assert mount["type"] == "bind", variable
    # `token new` replaces the tokens file atomically: its folder is writable, the TLS folder not.
    assert not mounts["/data/auth"].get("read_only") and mounts["/data/tls"]["read_only"]
    assert "https://127.0.0.1:8000/readyz" in " ".join(ray["healthcheck"]["test"])
    assert env["SHADOWTUTOR_CHECKPOINT_SECRET_FILE"] == "/run/secrets/checkpoint_secret"


def test_the_single_process_override_does_not_reach_ray(run_tool) -> None:
    """Why the Ray override exists: the single-process one targets `server`, which the Ray overlay
    switches off, so on top of it Ray would run without TLS and tokens."""
    config = _config_with(run_tool, *FILES, *SERVER_TLS_TOKENS)
    assert "server" not in config["services"]
    assert "SHADOWTUTOR_TOKENS_FILE" not in _env_of(config, "ray")
    single = _config_with(run_tool, "--file", str(REPO_ROOT / "docker-compose.yml"), *SERVER_TLS_TOKENS)
    ray_override = _env_of(_config_with(run_tool, *FILES, *RAY_TLS_TOKENS), "ray")
    server_env = _env_of(single, "server")
    added = {k: v for k, v in server_env.items() if k.startswith(("SHADOWTUTOR_TLS", "SHADOWTUTOR_TOKENS"))}
    assert added and all(ray_override[k] == v for k, v in added.items())


def _config_with(run_tool, *args: str) -> dict:
    result: subprocess.CompletedProcess = run_tool("docker-compose", *args, "config", "--format", "json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)
