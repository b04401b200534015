"""Orchestration of the demo: scene, server process, edge agent processes, report."""

from __future__ import annotations

import shutil
import time
import os
from dataclasses import dataclass, field
from pathlib import Path

from tqdm import tqdm

from shadowtutor.demo.processes import (
    LOOPBACK,
    ManagedProcess,
    ProcessFailed,
    free_port,
    shadowtutor_command,
    start_process,
    wait_http_ok,
)
from shadowtutor.demo.report import RunReport, run_report, write_report
from shadowtutor.scenes.cache import cached_scene
from shadowtutor.scenes.io import Scene


@dataclass(frozen=True)
class DemoConfig:
    out: Path
    preset: str = "fixed-street"
    frames: int = 300
    seed: int = 7
    size: tuple[int, int] = (640, 360)
    fps: float = 30.0
    cache_dir: Path | None = None
    teacher_args: tuple[str, ...] = field(default=())  # extra `serve` flags; default: the scene's labels
    ready_timeout: float = 120.0
    run_timeout: float = 1800.0


def _process_env() -> dict[str, str]:
    """Server and agent share this machine in the demo: half the cores each, no oversubscription."""
    return {"OMP_NUM_THREADS": str(max(1, (os.cpu_count() or 2) // 2))}


def _follow(agent: ManagedProcess, labels_dir: Path, total: int, label: str, timeout: float) -> None:
    """Show a progress bar from the label maps the agent writes until it exits."""
    deadline = time.monotonic() + timeout
    with tqdm(total=total, desc=label, unit="frame") as bar:
        while agent.alive():
            if time.monotonic() > deadline:
                agent.stop()
                raise ProcessFailed(f"{label} did not finish within {timeout:.0f} s: {agent.describe()}")
            done = sum(1 for _ in labels_dir.glob("*.png")) if labels_dir.is_dir() else 0
            bar.update(done - bar.n)
            time.sleep(0.3)
        bar.update(total - bar.n)
    if agent.returncode != 0:
        raise ProcessFailed(f"{label} failed: {agent.describe()}")


def _run_agent(config: DemoConfig, scene: Path, server_url: str, mode: str, logs: Path) -> Path:
    run_dir = config.out / ("shadowtutor" if mode == "distill" else "naive")
    shutil.rmtree(run_dir, ignore_errors=True)
    args = shadowtutor_command(
        "edge", "--server", server_url, "--source", str(scene / "video.mp4"), "--mode", mode,
        "--edge-id", f"demo-{mode}", "--output-dir", str(run_dir), "--save-labels",
        "--overlay" if mode == "distill" else "--no-overlay", "--metrics-port", "0",
    )
    agent = start_process(args, name=f"edge-{mode}", log_dir=logs, env=_process_env())
    try:
        title = "ShadowTutor" if mode == "distill" else "naive"
        _follow(agent, run_dir / "labels", config.frames, title, config.run_timeout)
    finally:
        agent.stop()
    return run_dir


def run_demo(config: DemoConfig) -> tuple[RunReport, RunReport, str]:
    config.out.mkdir(parents=True, exist_ok=True)
    logs = config.out / "logs"
    print(f"scene: {config.preset}, {config.frames} frames at {config.size[0]}x{config.size[1]} (cached)")
    scene_dir = cached_scene(config.preset, config.frames, config.seed, config.size, config.fps, config.cache_dir)
    port = free_port()
    teacher = config.teacher_args or ("--teacher", "labels", "--labels-dir", str(scene_dir))
    server = start_process(
        shadowtutor_command("serve", "--host", LOOPBACK, "--port", str(port), "--device", "cpu",
                            "--log-level", "warning", *teacher),
        name="server", log_dir=logs, env=_process_env(),
    )
    with server:
        wait_http_ok(f"http://{LOOPBACK}:{port}/readyz", timeout=config.ready_timeout, process=server)
        url = f"ws://{LOOPBACK}:{port}/v1/edge"
        shadow_dir = _run_agent(config, scene_dir, url, "distill", logs)
        naive_dir = _run_agent(config, scene_dir, url, "naive", logs)
    scene = Scene.open(scene_dir)
    shadow, naive = run_report(shadow_dir, scene), run_report(naive_dir, scene)
    return shadow, naive, write_report(config.out, scene_dir, shadow, naive)
