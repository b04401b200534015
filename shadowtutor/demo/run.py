"""Orchestration of the demo: scene, server process, edge agent processes, report."""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path

from shadowtutor.demo.processes import (
    LOOPBACK,
    follow_agent,
    free_port,
    half_cores_env,
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
    command: str = "shadowtutor demo"  # for the report
    change_based: bool = False  # the ShadowTutor edge labels change-based (--change-based)
    ready_timeout: float = 120.0
    run_timeout: float = 1800.0


def _run_agent(config: DemoConfig, scene: Path, server_url: str, mode: str, logs: Path) -> Path:
    run_dir = config.out / ("shadowtutor" if mode == "distill" else "naive")
    shutil.rmtree(run_dir, ignore_errors=True)
    args = shadowtutor_command(
        "edge", "--server", server_url, "--source", str(scene / "video.mp4"), "--mode", mode,
        "--edge-id", f"demo-{mode}", "--output-dir", str(run_dir), "--save-labels",
        "--overlay" if mode == "distill" else "--no-overlay", "--metrics-port", "0",
        *(("--change-based",) if config.change_based and mode == "distill" else ()),
    )
    agent = start_process(args, name=f"edge-{mode}", log_dir=logs, env=half_cores_env())
    try:
        title = "ShadowTutor" if mode == "distill" else "naive"
        follow_agent(agent, run_dir / "labels", config.frames, title, config.run_timeout)
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
        name="server", log_dir=logs, env=half_cores_env(),
    )
    with server:
        wait_http_ok(f"http://{LOOPBACK}:{port}/readyz", timeout=config.ready_timeout, process=server)
        url = f"ws://{LOOPBACK}:{port}/v1/edge"
        shadow_dir = _run_agent(config, scene_dir, url, "distill", logs)
        naive_dir = _run_agent(config, scene_dir, url, "naive", logs)
    scene = Scene.open(scene_dir)
    shadow, naive = run_report(shadow_dir, scene), run_report(naive_dir, scene)
    return shadow, naive, write_report(config.out, scene_dir, shadow, naive, config.command)
