"""Where a Ray head started as the Compose recipe starts it listens: on loopback only, Ray's unauthenticated
metrics endpoints (the autoscaler's, the dashboard head's, each node's metrics export) included. A real
one-node cluster (``tests.support.ray_listening``), in the environment docker-compose.ray.yml gives Ray;
its listening sockets read from /proc."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.deploy.prometheus_stack import REPO_ROOT

pytest.importorskip("ray", reason="the serve extra is not installed (pip install 'shadowtutor[serve]')")
pytestmark = pytest.mark.slow

LOOPBACK = ("127.", "::1")


class _ComposeLoader(yaml.SafeLoader):
    """Compose's own tags (``!override``, ``!reset``) read as plain values."""


_ComposeLoader.add_multi_constructor("!", lambda loader, tag, node: None)


def _compose_ray_environment() -> dict[str, str]:
    compose = yaml.load((REPO_ROOT / "docker-compose.ray.yml").read_text(), Loader=_ComposeLoader)
    return {key: str(value) for key, value in compose["services"]["ray"]["environment"].items()
            if key.startswith("RAY_")}


def test_a_head_started_as_compose_does_listens_on_loopback_only(tmp_path: Path) -> None:
    token = tmp_path / "ray-token"
    token.write_text(secrets.token_hex(32) + "\n")
    token.chmod(0o600)
    # (the agents' registration timeout raised: on a loaded machine they start late)
    env = {**os.environ, **_compose_ray_environment(), "RAY_AUTH_TOKEN_PATH": str(token),
           "RAY_agent_register_timeout_ms": "180000", "PYTHONPATH": str(REPO_ROOT)}
    # a short path: Ray's socket names must fit in 107 bytes
    temp_dir = Path("/tmp") / f"ray-listening-{secrets.token_hex(4)}"
    try:
        result = subprocess.run([sys.executable, "-m", "tests.support.ray_listening", str(temp_dir)],
                                cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=300)
    finally:
        shutil.rmtree(temp_dir, ignore_errors=True)
    assert result.returncode == 0, result.stderr[-3000:]
    rows = json.loads(result.stdout.strip().splitlines()[-1])
    # (44217 and 44227, the autoscaler's and the dashboard head's metrics, are missing when another
    # cluster on this machine holds them)
    assert len(rows) >= 4, rows
    assert [row for row in rows if not row[0].startswith(LOOPBACK)] == [], rows
