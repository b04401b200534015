"""The helpers in docker/ that the images run: the edge entry point, the requirement selection
that keeps an image's own OpenCV and ONNX Runtime, and the installer that keeps an image's own
torch and installs everything else at its constraints.txt version."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.deploy.prometheus_stack import REPO_ROOT

DOCKER_DIR = REPO_ROOT / "docker"
SHELL_SCRIPTS = [DOCKER_DIR / "edge-entrypoint.sh", DOCKER_DIR / "install-shadowtutor.sh",
                 REPO_ROOT / ".ci" / "install-system-deps.sh"]


def _load_select_requirements():
    spec = importlib.util.spec_from_file_location("select_requirements", DOCKER_DIR / "select_requirements.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _fake_command(bin_dir: Path, name: str, body: str) -> None:
    path = bin_dir / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)


@pytest.mark.parametrize("script", SHELL_SCRIPTS, ids=lambda p: p.name)
def test_shellcheck_passes(run_tool, script: Path) -> None:
    result = run_tool("shellcheck", str(script))
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"BALENA_DEVICE_NAME_AT_INIT": "gate-cam"}, "gate-cam"),
        ({"BALENA_DEVICE_NAME_AT_INIT": "gate-cam", "SHADOWTUTOR_EDGE_ID": "cam-7"}, "cam-7"),
        ({}, "<unset>"),  # the agent's own default (the hostname) applies
    ],
)
def test_edge_entrypoint_runs_the_agent_with_an_edge_id(tmp_path: Path, env: dict, expected: str) -> None:
    # A stand-in for the installed `shadowtutor` console script that reports how it was called.
    _fake_command(tmp_path, "shadowtutor", 'echo "${SHADOWTUTOR_EDGE_ID-<unset>}|$*"\n')
    base = {k: v for k, v in os.environ.items() if k not in ("SHADOWTUTOR_EDGE_ID", "BALENA_DEVICE_NAME_AT_INIT")}
    result = subprocess.run(
        [str(DOCKER_DIR / "edge-entrypoint.sh"), "--max-frames", "3"],
        env={**base, **env, "PATH": f"{tmp_path}:{base['PATH']}"},
        capture_output=True, text=True, check=True,
    )
    assert result.stdout.strip() == f"{expected}|edge --max-frames 3"


def test_select_requirements_keeps_core_and_chosen_extras_only() -> None:
    module = _load_select_requirements()
    selected = module.select("shadowtutor", {"edge"})
    names = {module.normalise(re.split(r"[<>=!~\[ ]", r)[0]) for r in selected}
    assert {"torch", "numpy", "zstandard", "pydantic-settings", "websockets", "prometheus-client"} <= names
    assert not {"torchvision", "scikit-image", "matplotlib", "tqdm"} & names  # server, scenes, bench extras
    assert "fastapi" not in names and "shadowtutor" not in names


def test_select_requirements_leaves_out_opencv_only_where_the_image_has_cv2(monkeypatch) -> None:
    module = _load_select_requirements()
    monkeypatch.setattr(module, "image_has", lambda name: name == "cv2")
    assert not any("opencv" in r for r in module.select("shadowtutor", {"edge"}))
    monkeypatch.setattr(module, "image_has", lambda name: False)
    assert any(r.startswith("opencv-python-headless") for r in module.select("shadowtutor", {"edge"}))


def test_select_requirements_leaves_out_onnxruntime_where_the_image_has_a_gpu_build(monkeypatch) -> None:
    module = _load_select_requirements()
    monkeypatch.setattr(module, "image_has", lambda name: name == "onnxruntime")  # the Jetson's onnxruntime-gpu
    selected = module.select("shadowtutor", {"edge", "onnx"})
    assert any(r.startswith("onnx>=") for r in selected) and not any(r.startswith("onnxruntime") for r in selected)


def test_select_requirements_refuses_unknown_extras() -> None:
    result = subprocess.run(
        [sys.executable, str(DOCKER_DIR / "select_requirements.py"), "shadowtutor", "--extras", "edge,gpu"],
        capture_output=True, text=True, check=False,
    )
    assert result.returncode == 2 and "no extra ['gpu']" in result.stderr


def test_installer_pins_the_images_torch_and_the_lock_and_installs_in_two_steps(tmp_path: Path) -> None:
    # A stand-in `python3` for the image's: `-m pip` is recorded (the image's torch and numpy are
    # "installed"), anything else runs the real interpreter (select_requirements.py).
    log = tmp_path / "pip.log"
    _fake_command(tmp_path, "python3", f"""\
if [ "$1 $2" = "-m pip" ]; then
    shift 2
    if [ "$1" = list ]; then printf 'numpy==1.26.4\\nrequests==2.32.0\\ntorch==2.5.1+cu124\\n'; exit 0; fi
    echo "pip $*" >>{log}
    for arg; do case $prev in --constraint|--requirement) sed 's/^/  /' "$arg" >>{log};; esac; prev=$arg; done
    exit 0
fi
exec {sys.executable} "$@"
""")
    src = tmp_path / "src"
    src.mkdir()
    (src / "constraints.txt").write_text("# the lock\nTorch==2.14.1\nwebsockets==15.0\nzstandard==0.25.0\n")
    result = subprocess.run(
        [str(DOCKER_DIR / "install-shadowtutor.sh"), str(src), "edge", "/wheels/extra.whl"],
        env={**os.environ, "PYTHON": str(tmp_path / "python3")}, capture_output=True, text=True, check=False,
    )
    assert result.returncode == 0, result.stderr
    first, second = [line for line in log.read_text().splitlines() if line.startswith("pip ")]
    assert first == f"pip install --no-cache-dir --no-deps {src}"
    assert second.startswith("pip install --no-cache-dir --constraint ") and second.endswith("/wheels/extra.whl")
    indented = [line.strip() for line in log.read_text().splitlines() if line.startswith("  ")]
    # The image's torch and numpy, then the lock without its own torch pin.
    assert indented[:5] == ["numpy==1.26.4", "torch==2.5.1+cu124", "# the lock", "websockets==15.0",
                            "zstandard==0.25.0"]
    assert "prometheus-client>=0.20" in indented and "fastapi" not in " ".join(indented)


def test_constraints_pin_the_torch_that_the_server_image_and_ci_use() -> None:
    pins = dict(line.split("==") for line in (REPO_ROOT / "constraints.txt").read_text().splitlines()
                if line and not line.startswith("#"))
    assert "scikit-image" in pins and "fastapi" in pins and "onnxruntime" in pins  # every extra is locked
    dockerfile = (REPO_ROOT / "Dockerfile.server").read_text()
    assert f"ARG PYTORCH_VERSION={pins['torch']}\n" in dockerfile
    edge = (REPO_ROOT / "Dockerfile.edge").read_text()
    assert f"ARG TORCH_VERSION={pins['torch']}\n" in edge
