"""The deployment pages are followable as written: every fenced block marked ``<!-- tested -->``
in docs/deploy/*.md runs, in the page's order, in a fresh folder holding a copy of the repository's
deployment files, with the page's exported variables carried from block to block; each block must
exit 0, and what the page's blocks make is then checked (the certificate and key the server
accepts, the tokens and the checkpoint secret it reads, the kustomization's image).

Stand-ins, where the real tool cannot run here: ``docker compose`` is Docker Compose's own binary
(docker-compose, which resolves and validates the files without an engine; any other ``docker``
command fails the block), and ``shadowtutor`` is this checkout's CLI. ``HOME`` and ``SHARED`` (the
"shared storage" of the VM recipe) are folders of the test."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.deploy.conftest import require_tool
from tests.deploy.markdown_docs import fenced_blocks
from tests.deploy.prometheus_stack import REPO_ROOT

PAGES = REPO_ROOT / "docs" / "deploy"
# what a page's commands read from the checkout
DEPLOYMENT_FILES = ("docker-compose.yml", "docker-compose.ray.yml", "deploy", "dashboards")
TOOLS = {
    "compose.md": ("docker-compose", "openssl"),
    "ray-serve.md": ("docker-compose", "openssl"),
    "kuberay.md": ("kubectl",),
}


def marked_blocks(page: Path) -> list[str]:
    """The text of each block of ``page`` marked ``tested``, in order."""
    return [block.text for block in fenced_blocks(page) if block.marker == "tested"]


def _shims(folder: Path) -> Path:
    folder.mkdir()
    compose = require_tool("docker-compose")
    (folder / "docker").write_text(
        "#!/bin/sh\n"
        f'if [ "$1" = compose ]; then shift; exec "{compose}" "$@"; fi\n'
        'echo "docker $1: needs a Docker engine, which this test has not" >&2; exit 97\n'
    )
    (folder / "shadowtutor").write_text(f'#!/bin/sh\nexec "{sys.executable}" -m shadowtutor_cli "$@"\n')
    for shim in folder.iterdir():
        shim.chmod(0o755)
    return folder


def run_page(page: Path, workdir: Path, timeout: float = 120) -> None:
    """Run ``page``'s tested blocks in ``workdir``; AssertionError naming the block that failed."""
    for name in DEPLOYMENT_FILES:
        source = REPO_ROOT / name
        (shutil.copytree if source.is_dir() else shutil.copy)(source, workdir / name)
    home, shared = workdir / ".home", workdir / ".shared"
    home.mkdir()
    shims = _shims(workdir / ".shims")
    env = {
        "PATH": f"{shims}:{os.environ.get('PATH', '/usr/bin:/bin')}",
        "HOME": str(home),
        "SHARED": str(shared),
        "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), str(REPO_ROOT / "lab")]),
        "LANG": "C.UTF-8",
    }
    exported = workdir / ".exported.sh"
    exported.write_text("")
    for number, block in enumerate(marked_blocks(page), 1):
        script = f"set -eo pipefail\nsource {exported}\n{block}\nexport -p > {exported}\n"
        done = subprocess.run(
            ["bash", "-c", script], cwd=workdir, env=env, capture_output=True, text=True, timeout=timeout, check=False
        )
        assert done.returncode == 0, (
            f"{page.name}, tested block {number} exits {done.returncode}:\n{block}\n"
            f"{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
        )


def _check_compose(workdir: Path) -> None:
    from services.server.settings import ServerSettings

    assert len((workdir / "secrets" / "grafana_admin_password").read_text().strip()) >= 24
    settings = ServerSettings(tls_cert=workdir / "data/tls/server.crt", tls_key=workdir / "data/tls/server.key")
    assert settings.tls_enabled and (workdir / "data" / "auth").is_dir()


def _check_ray_serve(workdir: Path) -> None:
    from services.server.settings import ServerSettings

    shared = workdir / ".shared"
    tokens = json.loads((shared / "tokens.json").read_text())
    assert "cam-entrance" in json.dumps(tokens) and "ops" in json.dumps(tokens)
    settings = ServerSettings(tokens_file=shared / "tokens.json", checkpoint_secret_file=shared / "checkpoint-secret")
    assert settings.auth_enabled and settings.checkpoint_key()
    assert (workdir / ".home" / ".shadowtutor" / "ray-token").stat().st_mode & 0o077 == 0
    assert (workdir / "secrets" / "checkpoint_secret").is_file()


def _check_kuberay(workdir: Path) -> None:
    built = (workdir / "shadowtutor-kuberay.yaml").read_text()
    assert "registry.example.com/shadowtutor/server-ray:" in built and "shadowtutor.invalid" not in built


CHECKS: dict[str, Callable[[Path], None]] = {
    "compose.md": _check_compose,
    "ray-serve.md": _check_ray_serve,
    "kuberay.md": _check_kuberay,
}


def test_the_pages_that_have_commands_to_run_here_mark_them() -> None:
    marked = {page.name for page in PAGES.glob("*.md") if marked_blocks(page)}
    assert marked == set(CHECKS)


@pytest.mark.parametrize("name", sorted(CHECKS))
def test_the_marked_blocks_of_the_page_run_as_written(name: str, tmp_path: Path) -> None:
    for tool in TOOLS[name]:
        require_tool(tool)
    run_page(PAGES / name, tmp_path)
    CHECKS[name](tmp_path)


def test_a_failing_block_fails_the_page(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        '<!-- tested -->\n```bash\nexport A=1\n```\n\n<!-- tested -->\n```bash\ntest "$A" = 1\ndocker run hello\n```\n'
    )
    workdir = tmp_path / "work"
    workdir.mkdir()
    require_tool("docker-compose")
    with pytest.raises(AssertionError, match="tested block 2 exits 97"):
        run_page(page, workdir)


def _shadowtutor_commands() -> list[tuple[str, str]]:
    """(page, arguments) of every ``shadowtutor ...`` command in the pages' shell blocks, the
    untested ones included (a ``\\``-continued command joined, a trailing comment cut)."""
    found = []
    for page in sorted(PAGES.glob("*.md")):
        for block in fenced_blocks(page):
            if block.info in ("bash", "sh"):
                text = re.sub(r"\\\n\s*", " ", block.text)
                found += [(page.name, m.group(1)) for m in re.finditer(r"(?:^|[\s/])shadowtutor (\S[^\n]*)", text)]
    return found


def test_the_pages_give_shadowtutor_commands() -> None:
    assert len(_shadowtutor_commands()) >= 10


@pytest.mark.parametrize("page, arguments", _shadowtutor_commands())
def test_every_shadowtutor_command_of_the_pages_parses(page: str, arguments: str) -> None:
    """Also those that cannot run here (a GPU, a Ray cluster, mediapipe): a misspelt or removed
    flag fails."""
    from shadowtutor_cli import build_parser

    argv = shlex.split(arguments, comments=True)
    try:
        build_parser().parse_args(argv)
    except SystemExit as exit_:
        pytest.fail(f"{page}: shadowtutor {arguments}: exits {exit_.code}")
