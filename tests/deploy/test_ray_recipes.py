"""Every `ray start --head` the documentation and the deployment files give starts Ray closed: no
dashboard (or none on a public address), and the recipe's text asks for token authentication."""

from __future__ import annotations

import re

import pytest

from tests.deploy.markdown_docs import join_continued
from tests.deploy.prometheus_stack import REPO_ROOT

SOURCES = [*sorted((REPO_ROOT / "docs").glob("*.md")), *sorted((REPO_ROOT / "docs" / "deploy").glob("*.md")),
           REPO_ROOT / "README.md",
           REPO_ROOT / "docker-compose.yml", REPO_ROOT / "docker-compose.ray.yml"]


def _head_starts() -> list[tuple[str, str]]:
    """(file, command) for each `ray start --head` with flags, a command continued with `\\` joined into one."""
    found = []
    for path in SOURCES:
        text = join_continued(path.read_text())
        found += [(path.name, m.group(0)) for m in re.finditer(r"ray start --head --[^\n`&]*", text)]
    return found


def test_the_documentation_starts_ray_heads() -> None:
    assert len(_head_starts()) >= 4


@pytest.mark.parametrize("source, command", _head_starts())
def test_every_head_starts_without_the_dashboard(source: str, command: str) -> None:
    assert "--include-dashboard=false" in command, f"{source}: {command}"
    assert "dashboard-host" not in command, f"{source}: {command}"


def test_the_recipes_ask_for_token_authentication() -> None:
    deploy = (REPO_ROOT / "docs" / "deploy" / "ray-serve.md").read_text()
    closed = deploy[deploy.index("## Ray closed by default"):deploy.index("## Two replicas on one machine")]
    assert "export RAY_AUTH_MODE=token" in closed and "RAY_AUTH_TOKEN_PATH" in closed
    for port in ("6379", "10001", "8265", "8000"):
        assert f"| {port}" in closed, port
    security = (REPO_ROOT / "docs" / "security.md").read_text()
    assert "RAY_AUTH_MODE=token" in security
