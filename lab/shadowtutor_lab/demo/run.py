"""Orchestration of the demo: scene, server process, edge agent processes, report.

By default the scene is a real clip labelled by the real (CPU) teacher the server runs; with
``clip=None`` it is a generated scene whose ground truth is the teacher (free for the server).
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from shadowtutor.scene_store import Scene
from shadowtutor_lab.demo.processes import (
    LOOPBACK,
    follow_agent,
    free_port,
    half_cores_env,
    shadowtutor_command,
    start_process,
    wait_http_ok,
)
from shadowtutor_lab.demo.report import RunReport, run_report, write_report
from shadowtutor_lab.demo.server_time import scrape_server_time
from shadowtutor_lab.evaluation.h264_baseline import h264_offloading
from shadowtutor_lab.scenes.cache import cached_scene
from shadowtutor_lab.scenes.real import clip_info, real_scene, scaled_size

TEACHER_NOTES = {
    "mediapipe": "`mediapipe`, MediaPipe's selfie segmentation run tiled on the CPU (real weights from the "
                 "mediapipe wheel; it labels persons only, everything else is background)",
    "labels": "the generated scene's ground truth (`labels`: exact and free for the server, "
              "unlike any real teacher)",
}


@dataclass(frozen=True)
class DemoConfig:
    out: Path
    clip: str | None = "vtest"  # a real clip (shadowtutor_lab.scenes.real), or None for a generated scene
    teacher: str = "mediapipe"  # the real clip's teacher
    width: int = 480  # a real clip is scaled to this width
    preset: str = "fixed-street"  # generated scene: preset, seed, size, fps
    frames: int = 300  # a real clip's first frames (all of a shorter one)
    seed: int = 7
    size: tuple[int, int] = (640, 360)
    fps: float = 30.0
    cache_dir: Path | None = None
    command: str = "shadowtutor demo"  # for the report
    change_based: bool = False  # the ShadowTutor edge labels change-based (--change-based)
    flow_path: bool = False  # the ShadowTutor edge runs the region flow path (--flow-path)
    ready_timeout: float = 120.0
    run_timeout: float = 1800.0


def _scene(config: DemoConfig) -> tuple[Path, tuple[str, ...], str]:
    """The scene directory, the server's teacher flags, and the teacher's note for the report."""
    if config.clip is None:
        print(f"scene: {config.preset}, {config.frames} frames at {config.size[0]}x{config.size[1]} (cached)")
        scene_dir = cached_scene(config.preset, config.frames, config.seed, config.size, config.fps, config.cache_dir)
        return scene_dir, ("--teacher", "labels", "--labels-dir", str(scene_dir)), TEACHER_NOTES["labels"]
    frames = min(config.frames, clip_info(config.clip)[0])
    size = scaled_size(config.clip, config.width)
    print(f"scene: real clip {config.clip}, {frames} frames at {size[0]}x{size[1]}, labelled by the "
          f"{config.teacher} teacher (cached)")
    scene_dir = real_scene(config.clip, frames, size, config.teacher, config.cache_dir)
    return scene_dir, ("--teacher", config.teacher), TEACHER_NOTES.get(config.teacher, f"`{config.teacher}`")


def _run_agent(config: DemoConfig, scene: Path, server_url: str, mode: str, logs: Path) -> Path:
    run_dir = config.out / ("shadowtutor" if mode == "distill" else "naive")
    shutil.rmtree(run_dir, ignore_errors=True)
    args = shadowtutor_command(
        "edge", "--server", server_url, "--source", str(scene / "video.mp4"), "--mode", mode,
        "--edge-id", f"demo-{mode}", "--output-dir", str(run_dir), "--save-labels",
        "--state-dir", str(config.out / "edge-state"),
        "--overlay" if mode == "distill" else "--no-overlay", "--metrics-port", "0",
        # naive offloading as the demo's JPEG row; H.264 offloading is measured on the same frames
        *(("--frame-codecs", "jpeg") if mode == "naive" else ()),
        *(("--change-based",) if config.change_based and mode == "distill" else ()),
        *(("--flow-path",) if config.flow_path and mode == "distill" else ()),
    )
    agent = start_process(args, name=f"edge-{mode}", log_dir=logs, env=half_cores_env())
    try:
        title = "ShadowTutor" if mode == "distill" else "naive"
        follow_agent(agent, run_dir / "labels", Scene.open(scene).meta.frames, title, config.run_timeout)
    finally:
        agent.stop()
    return run_dir


def _h264_teacher_miou(config: DemoConfig, scene: Scene) -> float | None:
    """The real teacher's mean mIoU (%) on the clip's frames as H.264 offloading delivers them (the scene's
    clock, CRF 23) against its labels of the stored frames; None for a generated scene (its teacher is the
    ground truth, blind to the pixels)."""
    if config.clip is None:
        return None
    from shadowtutor.teachers import build_teacher
    from shadowtutor_lab.evaluation.evaluate import naive_offloading
    from shadowtutor_lab.evaluation.frame_link import FrameLink

    print("H.264 offloading: the teacher on the decoded frames")
    runs = naive_offloading(scene, len(scene), build_teacher(config.teacher),
                            {"h264": FrameLink("h264", fps=scene.meta.fps)}, progress=True)
    return 100.0 * float(np.mean(runs["h264"].miou))


def run_demo(config: DemoConfig) -> tuple[RunReport, RunReport, str]:
    config.out.mkdir(parents=True, exist_ok=True)
    logs = config.out / "logs"
    scene_dir, teacher, note = _scene(config)
    port = free_port()
    server = start_process(
        shadowtutor_command("serve", "--host", LOOPBACK, "--port", str(port), "--device", "cpu",
                            "--log-level", "warning", *teacher),
        name="server", log_dir=logs, env=half_cores_env(),
    )
    with server:
        wait_http_ok(f"http://{LOOPBACK}:{port}/readyz", timeout=config.ready_timeout, process=server)
        url, metrics = f"ws://{LOOPBACK}:{port}/v1/edge", f"http://{LOOPBACK}:{port}/metrics"
        start = scrape_server_time(metrics)
        shadow_dir = _run_agent(config, scene_dir, url, "distill", logs)
        middle = scrape_server_time(metrics)
        naive_dir = _run_agent(config, scene_dir, url, "naive", logs)
        end = scrape_server_time(metrics)
    scene = Scene.open(scene_dir)
    shadow, naive = run_report(shadow_dir, scene, middle - start), run_report(naive_dir, scene, end - middle)
    h264 = h264_offloading(scene, naive.steady_down_per_frame * naive.frames,
                           teacher_miou=_h264_teacher_miou(config, scene))
    return shadow, naive, write_report(config.out, scene_dir, shadow, naive, h264, scene.meta.fps, config.command,
                                       note)
