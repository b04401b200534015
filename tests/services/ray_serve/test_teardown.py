"""``shadowtutor serve --ray ADDRESS --stop`` stops that Ray cluster on this machine and no other: two heads
started as the deployment guide starts them (``ray start --head``, real processes, each with its own temp
dir), the first stopped, the second untouched and still joinable (``--list`` answers), then stopped too."""

from __future__ import annotations

import os
import secrets
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("ray.serve", reason="the serve extra is not installed (pip install 'shadowtutor[serve]')")

from services.ray_serve.teardown import end_processes, processes_of  # noqa: E402
from shadowtutor_lab.demo.processes import free_port  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.timeout(400)]
RAY = Path(sys.executable).with_name("ray")


TOKEN = Path(tempfile.mkdtemp(prefix="raytok", dir="/tmp")) / "ray-token"


def _env() -> dict[str, str]:
    """The recipe's environment (docs/deploy/ray-serve.md, "Ray closed by default"): token authentication with a token
    of this test's own, for the heads and every driver."""
    if not TOKEN.exists():
        TOKEN.write_text(secrets.token_hex(32))
        TOKEN.chmod(0o600)
    return {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "RAY_USAGE_STATS_ENABLED": "0",
            "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(TOKEN)}


def _running(temp_dir: str) -> list[str]:
    """Command lines of this machine's processes that name ``temp_dir``."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            line = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if entry.name.isdigit() and temp_dir in line:
            found.append(line)
    return found


def _answers(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
    except OSError:
        return False
    return True


def _shadowtutor(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "shadowtutor", "serve", *args], capture_output=True, text=True,
                          timeout=180, env=_env(), check=False)


@pytest.fixture
def heads() -> Iterator[list[tuple[str, int]]]:
    started = []
    try:
        for _ in range(2):
            # short: Ray's socket paths go under it
            temp_dir, port = tempfile.mkdtemp(prefix="rayst", dir="/tmp"), free_port()
            started.append((temp_dir, port))
            subprocess.run(
                [str(RAY), "start", "--head", "--node-ip-address", "127.0.0.1", "--port", str(port),
                 "--num-cpus", "1", "--include-dashboard=false", "--disable-usage-stats", "--temp-dir", temp_dir,
                 "--ray-client-server-port", str(free_port()), "--dashboard-agent-listen-port", str(free_port())],
                check=True, capture_output=True, timeout=180, env=_env(),
            )
        yield started
    finally:
        for temp_dir, _ in started:  # whatever a failed test left: only these clusters' processes
            end_processes(processes_of(temp_dir), grace=5.0)


def test_stop_ends_this_cluster_and_no_other(heads: list[tuple[str, int]]) -> None:
    (first_dir, first), (second_dir, second) = heads
    assert _running(first_dir) and _running(second_dir) and _answers(first) and _answers(second)
    stopped = _shadowtutor("--ray", f"127.0.0.1:{first}", "--stop")
    assert stopped.returncode == 0, stopped.stderr
    assert f"the Ray cluster at 127.0.0.1:{first} ({first_dir}/session_" in stopped.stdout
    assert _running(first_dir) == [] and not _answers(first)
    assert _running(second_dir) and _answers(second)
    listed = _shadowtutor("--ray", f"127.0.0.1:{second}", "--list")
    assert listed.returncode == 0, listed.stderr
    assert "  teaching: not running" in listed.stdout  # joined: the cluster runs, without the application
    assert _shadowtutor("--ray", f"127.0.0.1:{second}", "--stop").returncode == 0
    assert _running(second_dir) == [] and not _answers(second)


def test_stop_without_a_cluster_is_one_clear_error() -> None:
    stopped = _shadowtutor("--ray", f"127.0.0.1:{free_port()}", "--stop")
    assert stopped.returncode == 2
    assert stopped.stderr.startswith("shadowtutor serve: error: no Ray cluster reachable at")
    assert len(stopped.stderr.strip().splitlines()) == 1
