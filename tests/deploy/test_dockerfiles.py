"""Dockerfile.server, Dockerfile.jetson, Dockerfile.edge: hadolint passes, each image runs its
command as a non-root user with a health check on its port, base images are pinned, and every
file a COPY takes from the build context exists and is not left out by .dockerignore."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest

from tests.deploy.prometheus_stack import REPO_ROOT

DOCKERFILES = {
    # name: (ENTRYPOINT, port)
    "Dockerfile.server": (["shadowtutor", "serve"], "8000"),
    "Dockerfile.jetson": (["shadowtutor-edge"], "9108"),
    "Dockerfile.edge": (["shadowtutor-edge"], "9108"),
}


def instructions(path: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) in order, continuation lines joined, comments dropped."""
    joined = re.sub(r"\\\n", " ", "\n".join(
        line for line in path.read_text().splitlines() if not line.lstrip().startswith("#")
    ))
    result = []
    for line in joined.splitlines():
        if line.strip():
            word, _, rest = line.strip().partition(" ")
            result.append((word.upper(), rest.strip()))
    return result


def ignore_patterns() -> list[str]:
    lines = (REPO_ROOT / ".dockerignore").read_text().splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


def _pattern(pattern: str) -> re.Pattern:
    """A .dockerignore pattern (Go filepath.Match plus **) as a regex that also matches the contents."""
    out = ""
    for token in re.split(r"(\*\*/|\*\*|\*|\?)", pattern.strip("/")):
        out += {"**/": "(?:.*/)?", "**": ".*", "*": "[^/]*", "?": "[^/]"}.get(token, re.escape(token))
    return re.compile(out + "(?:/.*)?")


def is_ignored(path: str, patterns: list[str]) -> bool:
    ignored = False
    for pattern in patterns:
        negated = pattern.startswith("!")
        if _pattern(pattern.lstrip("!")).fullmatch(path):
            ignored = not negated
    return ignored


def test_ignore_matcher_follows_docker_rules() -> None:
    patterns = ["*", "!pkg", "**/__pycache__"]
    assert is_ignored(".git/config", patterns) and is_ignored("tests/test_x.py", patterns)
    assert not is_ignored("pkg/sub/mod.py", patterns)
    assert is_ignored("pkg/sub/__pycache__/mod.pyc", patterns)


@pytest.mark.parametrize("name", DOCKERFILES)
def test_hadolint_passes(run_tool, name: str) -> None:
    result = run_tool("hadolint", "--no-color", name)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("name", DOCKERFILES)
def test_image_runs_its_command_unprivileged_with_a_health_check(name: str) -> None:
    entrypoint, port = DOCKERFILES[name]
    steps = instructions(REPO_ROOT / name)
    kinds = [kind for kind, _ in steps]
    final = steps[len(kinds) - 1 - kinds[::-1].index("FROM"):]
    users = [args for kind, args in final if kind == "USER"]
    assert users and users[-1].split(":")[0] not in ("root", "0"), f"{name} runs as root"
    assert any(kind == "HEALTHCHECK" and port in args for kind, args in final), f"{name}: no health check"
    assert [json.loads(args) for kind, args in final if kind == "ENTRYPOINT"] == [entrypoint]
    assert any(kind == "EXPOSE" and args.split() == [port] for kind, args in final)


@pytest.mark.parametrize("name", DOCKERFILES)
def test_base_images_are_pinned(name: str) -> None:
    args: dict[str, str] = {}
    for kind, rest in instructions(REPO_ROOT / name):
        if kind == "ARG" and "=" in rest:
            key, _, value = rest.partition("=")
            args[key] = value.strip('"')
        if kind == "FROM":
            image = rest.split()[0]
            while "${" in image:  # ARG defaults may name other ARGs
                image = re.sub(r"\$\{(\w+)\}", lambda m: args[m.group(1)], image)
            repository, _, tag = image.rpartition(":")
            assert repository and tag and tag != "latest" and "$" not in image, f"{name}: FROM {image}"


@pytest.mark.parametrize("name", DOCKERFILES)
def test_copied_files_are_in_the_build_context(name: str) -> None:
    patterns = ignore_patterns()
    for kind, rest in instructions(REPO_ROOT / name):
        words = shlex.split(rest)
        if kind != "COPY" or any(w.startswith("--from") for w in words):
            continue
        for source in [w for w in words if not w.startswith("--")][:-1]:
            matches = sorted(REPO_ROOT.glob(source))
            assert matches or "*" in source, f"{name}: COPY {source}: no such file"
            for match in matches:
                files = [match] if match.is_file() else sorted(match.rglob("*.py"))
                for path in [match, *files]:
                    relative = path.relative_to(REPO_ROOT).as_posix()
                    assert not is_ignored(relative, patterns), f"{name}: COPY {relative} is in .dockerignore"


def test_the_server_image_checks_readiness_not_liveness() -> None:
    """A server whose models did not load must turn unhealthy: /readyz, not /healthz."""
    (check,) = [args for kind, args in instructions(REPO_ROOT / "Dockerfile.server") if kind == "HEALTHCHECK"]
    assert "/readyz" in check and "/healthz" not in check


@pytest.mark.parametrize("name", ["Dockerfile.edge", "Dockerfile.jetson"])
def test_edge_images_keep_their_state_under_the_output_volume(name: str) -> None:
    env = " ".join(args for kind, args in instructions(REPO_ROOT / name) if kind == "ENV")
    assert "SHADOWTUTOR_OUTPUT_DIR=/data/output" in env and "SHADOWTUTOR_STATE_DIR=/data/output/state" in env
