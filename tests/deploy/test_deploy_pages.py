"""The deployment pages are followable as written: every fenced block marked ``<!-- tested -->``
in docs/deploy/*.md runs, in the page's order, in a fresh folder holding a copy of the repository's
deployment files, with the page's exported variables carried from block to block; each block must
exit 0, and what the page's blocks make is then checked (the certificate and key the server
accepts, the tokens and the checkpoint secret it reads, the kustomization's image). Blocks marked
``<!-- tested: slow -->`` run only in the slow test of their page (the two-replica Ray recipe);
``background until "TEXT"`` keeps a block running (``serve --ray`` in the foreground) once its
output shows TEXT, and ends it with the page.

Stand-ins, where the real tool cannot run here: ``docker compose`` is Docker Compose's own binary
(docker-compose, which resolves and validates the files without an engine; any other ``docker``
command fails the block), and ``shadowtutor``, ``.venv/bin/shadowtutor``, ``.venv/bin/ray`` and
``.venv/bin/python`` are this checkout's CLI and this interpreter's. ``HOME`` and ``SHARED`` (the
"shared storage" of the VM recipe) are folders of the test."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.deploy.conftest import require_tool
from tests.deploy.markdown_docs import fenced_blocks, join_continued
from tests.deploy.prometheus_stack import REPO_ROOT

PAGES = REPO_ROOT / "docs" / "deploy"
# what a page's commands read from the checkout
DEPLOYMENT_FILES = ("docker-compose.yml", "docker-compose.ray.yml", "deploy", "dashboards")
TOOLS = {
    "compose.md": ("docker-compose", "openssl"),
    "ray-serve.md": ("docker-compose", "openssl"),
    "kuberay.md": ("kubectl",),
}


@dataclass(frozen=True)
class Step:
    """A block to run: its text, whether it is slow (``tested: slow``), and for one that keeps
    running (``background until "TEXT"``) the text its output shows once it is up."""

    text: str
    slow: bool
    until: str | None


def marked_blocks(page: Path, slow: bool = False) -> list[Step]:
    """Each block of ``page`` marked ``tested`` (with ``slow``: ``tested: slow`` ones too), in order."""
    steps = []
    for block in fenced_blocks(page):
        marker = block.marker
        if not marker.startswith("tested"):
            continue
        background = re.search(r'background until "([^"]+)"', marker)
        step = Step(block.text, "slow" in marker, background.group(1) if background else None)
        if slow or not step.slow:
            steps.append(step)
    return steps


def _shims(folder: Path) -> Path:
    folder.mkdir(parents=True)
    compose = require_tool("docker-compose")
    (folder / "docker").write_text(
        "#!/bin/sh\n"
        f'if [ "$1" = compose ]; then shift; exec "{compose}" "$@"; fi\n'
        'echo "docker $1: needs a Docker engine, which this test has not" >&2; exit 97\n'
    )
    (folder / "shadowtutor").write_text(f'#!/bin/sh\nexec "{sys.executable}" -m shadowtutor_cli "$@"\n')
    (folder / "python").write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    ray = Path(sys.executable).with_name("ray")
    if ray.exists():
        (folder / "ray").write_text(f'#!/bin/sh\nexec "{ray}" "$@"\n')
    for shim in folder.iterdir():
        shim.chmod(0o755)
    return folder


def _wait_for(process: subprocess.Popen, log: Path, text: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while text not in log.read_text(errors="replace"):
        if process.poll() is not None or time.monotonic() > deadline:
            raise AssertionError(f"{text!r} never showed (exit {process.poll()}):\n{log.read_text()[-3000:]}")
        time.sleep(1)


def run_page(
    page: Path,
    workdir: Path,
    timeout: float = 120,
    slow: bool = False,
    replace: dict[str, str] | None = None,
    env: dict[str, str] | None = None,
) -> None:
    """Run ``page``'s tested blocks (``slow``: the slow ones too) in ``workdir``, each text with
    ``replace``'s substitutions; AssertionError naming the block that failed. Blocks that run in
    the background are ended (their process group) when the page is done."""
    for name in DEPLOYMENT_FILES:
        source = REPO_ROOT / name
        (shutil.copytree if source.is_dir() else shutil.copy)(source, workdir / name)
    home, shared = workdir / ".home", workdir / ".shared"
    home.mkdir()
    shims = _shims(workdir / ".shims")
    # the recipes' `.venv/bin/...` are this interpreter's
    shutil.copytree(shims, workdir / ".venv" / "bin")
    env = {
        "PATH": f"{shims}:{os.environ.get('PATH', '/usr/bin:/bin')}",
        "HOME": str(home),
        "SHARED": str(shared),
        "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), str(REPO_ROOT / "lab")]),
        "LANG": "C.UTF-8",
        **(env or {}),
    }
    exported = workdir / ".exported.sh"
    exported.write_text("")
    running: list[subprocess.Popen] = []
    try:
        for number, step in enumerate(marked_blocks(page, slow), 1):
            text = step.text
            for old, new in (replace or {}).items():
                text = text.replace(old, new)
            if step.until is not None:
                log = workdir / f".block-{number}.log"
                with log.open("w") as out:
                    running.append(
                        subprocess.Popen(
                            ["bash", "-c", f"source {exported}\nexec {text}"],
                            cwd=workdir,
                            env=env,
                            stdout=out,
                            stderr=subprocess.STDOUT,
                            start_new_session=True,
                        )
                    )
                _wait_for(running[-1], log, step.until, timeout)
                continue
            script = f"set -eo pipefail\nsource {exported}\n{text}\nexport -p > {exported}\n"
            done = subprocess.run(
                ["bash", "-c", script],
                cwd=workdir,
                env=env,
                capture_output=True,
                text=True,
                timeout=timeout,
                check=False,
            )
            assert done.returncode == 0, (
                f"{page.name}, tested block {number} exits {done.returncode}:\n{text}\n"
                f"{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
            )
    finally:
        for process in running:
            _end_group(process)


def _end_group(process: subprocess.Popen) -> None:
    """SIGTERM the process group of ``process`` (one the test started), SIGKILL it after 10 s."""
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(10)


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


def _end_processes_under(root: Path) -> None:
    """End every process whose command line or environment names ``root`` (a folder only this test
    made: the Ray cluster the recipe started, never another), by its id."""
    marker = str(root).encode()
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit() and int(proc.name) != os.getpid():
            try:
                if marker in (proc / "cmdline").read_bytes() or marker in (proc / "environ").read_bytes():
                    found.append(int(proc.name))
            except OSError:
                continue
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in found:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        time.sleep(3)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_the_two_replicas_recipe_runs_as_written() -> None:
    """ray-serve.md's slow blocks too: the mediapipe teacher installed, a Ray head, `serve --ray`
    with two CPU teaching replicas (in the background until its banner), `bench load` with 8
    simulated cameras for a minute (exit 1 on any unanswered key frame), the replicas' metrics,
    the application removed. Changed only where a shared machine needs it: the ports 6379 and 8000
    are free ones, Ray's files are under a folder of the test (RAY_TMPDIR), whose processes are
    ended by their ids afterwards (the page's `ray stop` ends every Ray cluster of the user), and
    the teacher's model is converted from the TFLite file the assets cache holds (skipped without
    it: fetching it needs the network)."""
    from shadowtutor.fetch import assets_dir
    from shadowtutor.teachers.mediapipe import MODEL
    from shadowtutor_lab.demo.processes import free_port

    tflite = assets_dir() / "models" / Path(MODEL.member).name
    if not tflite.is_file():
        pytest.skip(f"{tflite} is absent: `shadowtutor teacher install mediapipe` fetches it (network)")
    # short: Ray's socket paths live under it
    root = Path(tempfile.mkdtemp(prefix="strr", dir="/tmp"))
    try:
        (root / "assets" / "models").mkdir(parents=True)
        shutil.copy(tflite, root / "assets" / "models" / tflite.name)
        (root / "work").mkdir()
        ports = {"6379": str(free_port()), "8000": str(free_port())}
        env = {"RAY_TMPDIR": str(root / "ray"), "SHADOWTUTOR_ASSETS_DIR": str(root / "assets")}
        run_page(PAGES / "ray-serve.md", root / "work", timeout=420, slow=True, replace=ports, env=env)
        _check_ray_serve(root / "work")
        assert list((root / "work" / "shadowtutor-sessions").glob("*/*.ckpt"))
    finally:
        _end_processes_under(root)
        shutil.rmtree(root, ignore_errors=True)


def _shadowtutor_commands() -> list[tuple[str, str]]:
    """(page, arguments) of every ``shadowtutor ...`` command in the pages' shell blocks, the
    untested ones included (a ``\\``-continued command joined, a trailing comment cut)."""
    found = []
    for page in sorted(PAGES.glob("*.md")):
        for block in fenced_blocks(page):
            if block.info in ("bash", "sh"):
                text = join_continued(block.text)
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
