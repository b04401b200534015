"""``shadowtutor bench key-frame-scale``: key frames sent smaller, against bytes and P-8 mIoU.

For each scale (a share of the frame's sides, :func:`~shadowtutor.protocol.video_stream.scaled_frame_size`)
P-8 runs on every scene through the harness with the link codecs at that key-frame scale: the edge
agent's encoder sends each key frame at the scale, the server decodes it, has it labelled at that size
and trains on it; the edge's student still runs on full frames. Bytes are whole KEY_FRAME and UPDATE
messages per frame of the run (the model download at connection excluded) and per second at the scene's
frame rate; the baseline is naive offloading as one H.264 stream (every frame up, its labels down as
LABELS messages), over the same frames.
"""

from __future__ import annotations

import dataclasses
import itertools
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from shadowtutor.algorithms.params import AlgorithmParams
from shadowtutor.models.inference import onnx_available
from shadowtutor.models.pretrained import default_student_path
from shadowtutor.protocol.codecs import encode_labels
from shadowtutor.protocol.messages import Labels, encode
from shadowtutor.protocol.video_stream import scaled_frame_size
from shadowtutor.scene_store import Scene
from shadowtutor.teachers.labels import LabelsTeacher
from shadowtutor_lab.evaluation.accuracy import open_scenes, scene_command, sha256_of
from shadowtutor_lab.evaluation.h264_baseline import H264Offloading, h264_offloading
from shadowtutor_lab.evaluation.machine import machine_info
from shadowtutor_lab.evaluation.passes import ScenePass, run_passes
from shadowtutor_lab.evaluation.simulated_link import LinkCodecs
from shadowtutor_lab.evaluation.traffic import label_of

SETTING = "p8"
DEFAULT_SCALES = (1.0, 2 / 3, 0.5)


@dataclass(frozen=True)
class ScaleStudyConfig:
    scenes: tuple[Path, ...]
    codecs: LinkCodecs  # its key_frame_scale is replaced by each of ``scales``
    scales: tuple[float, ...] = DEFAULT_SCALES
    frames: int | None = None  # None: every frame of each scene
    student: Path | None = None
    backend: str = "auto"
    threads: int | None = None
    params: AlgorithmParams = AlgorithmParams()
    workers: int = 1
    progress: bool = True
    command: str = ""
    notes: tuple[str, ...] = ()


def labels_down_bytes(scene: Scene, frames: int) -> int:
    """Bytes of the LABELS messages (PNG) that carry the scene's stored labels of its first ``frames``
    frames: what a naive server's answers cost when its teacher gives those labels."""
    teacher = LabelsTeacher(scene.directory)
    total = 0
    for index, frame in enumerate(itertools.islice(scene.frames(), frames)):
        height, width = frame.shape[:2]
        labels = teacher.label(frame, index)
        total += len(encode(Labels(
            seq=index, frame_index=index, codec="png", width=width, height=height,
            payload=encode_labels(labels, "png"),
        )))
    return total


def _row(scale: float, trace: Any, frames: int, fps: float, size: tuple[int, int],
         baseline: H264Offloading) -> dict[str, Any]:
    up = sum(r.bytes_up for r in trace.records) / frames
    down = sum(r.bytes_down for r in trace.records) / frames
    key_frames = len(trace.key_frames)
    return {
        "scale": scale,
        "key_frame_size": list(size),
        "p8_miou": 100.0 * float(np.mean(trace.miou)),
        "key_frame_ratio": 100.0 * key_frames / frames,
        "updates": sum(not r.held_back for r in trace.records),
        "up_bytes_per_key_frame": sum(r.bytes_up for r in trace.records) / key_frames if key_frames else 0.0,
        "up_bytes_per_frame": up,
        "down_bytes_per_frame": down,
        "bytes_per_frame": up + down,
        "kbps": 8.0 * (up + down) * fps / 1000.0,
        "up_kbps": 8.0 * up * fps / 1000.0,
        "down_kbps": 8.0 * down * fps / 1000.0,
        "h264_offloading_ratio": baseline.bytes_per_frame / (up + down) if up + down else None,
    }


def run_study(config: ScaleStudyConfig) -> dict[str, Any]:
    """Run P-8 at every scale on every scene; the results object (JSON-ready)."""
    started = time.perf_counter()
    scenes = open_scenes(config.scenes)
    student_path = Path(config.student) if config.student else default_student_path()
    backend = config.backend if config.backend != "auto" else ("onnx" if onnx_available() else "torch")
    links = {scale: dataclasses.replace(config.codecs, key_frame_scale=scale) for scale in config.scales}
    frames_of = {name: min(len(s), config.frames or len(s)) for name, s in scenes.items()}
    jobs = {
        f"{name} at {scale:g}": ScenePass(f"{name} at {scale:g}", scene.directory, (SETTING,), frames_of[name],
                                          None, student_path, params=config.params, backend=backend,
                                          threads=config.threads, link=link)
        for name, scene in scenes.items() for scale, link in links.items()
    }
    done = {job.name: evaluation for job, evaluation in
            run_passes(list(jobs.values()), config.workers, config.threads or 1, config.progress)}
    results: dict[str, Any] = {}
    for name, scene in scenes.items():
        frames, fps = frames_of[name], scene.meta.fps
        baseline = h264_offloading(scene, labels_down_bytes(scene, frames), frames)
        rows = [_row(scale, done[f"{name} at {scale:g}"].traces[SETTING], frames, fps,
                     scaled_frame_size(scene.meta.width, scene.meta.height, scale), baseline)
                for scale in config.scales]
        results[name] = {
            "size": [scene.meta.width, scene.meta.height], "fps": fps, "frames": frames,
            "h264_offloading": {"up_bytes_per_frame": baseline.up_per_frame,
                                "down_bytes_per_frame": baseline.down_per_frame,
                                "bytes_per_frame": baseline.bytes_per_frame,
                                "kbps": 8.0 * baseline.bytes_per_frame * fps / 1000.0},
            "scales": rows,
        }
    return {
        "meta": {
            "command": config.command,
            "scene_commands": [scene_command(s) for s in scenes.values()],
            "codecs": label_of(config.codecs),
            "setting": "P-8",
            "teacher": "labels (each scene's ground truth)",
            "backend": backend,
            "threads": config.threads,
            "params": config.params.to_dict(),
            "student": {"path": str(student_path), "sha256": sha256_of(student_path)},
            "machine": machine_info(),
            "wall_seconds": time.perf_counter() - started,
            "notes": list(config.notes),
        },
        "scenes": results,
    }


def markdown(results: dict[str, Any]) -> str:
    """The results as a Markdown report: one table per scene."""
    meta = results["meta"]
    lines = ["# Key-frame scale: bytes against P-8 mIoU", "", f"`{meta['command']}`", "",
             f"Codecs: {meta['codecs']}; P-8, teacher: {meta['teacher']}; machine: {meta['machine']}.", ""]
    for name, scene in results["scenes"].items():
        base = scene["h264_offloading"]
        lines += [f"## {name} ({scene['size'][0]}x{scene['size'][1]}, {scene['fps']:g} FPS, "
                  f"{scene['frames']} frames)", "",
                  f"H.264 offloading: {base['bytes_per_frame']:,.0f} B/frame "
                  f"(up {base['up_bytes_per_frame']:,.0f}, down {base['down_bytes_per_frame']:,.0f}), "
                  f"{base['kbps']:,.0f} kbps.", "",
                  "| scale | key frame | P-8 mIoU | key frames | updates | up B/key frame | up B/frame "
                  "| down B/frame | kbps up+down | x fewer than H.264 offloading |",
                  "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for row in scene["scales"]:
            ratio = row["h264_offloading_ratio"]
            lines.append(
                f"| {row['scale']:.2f} | {row['key_frame_size'][0]}x{row['key_frame_size'][1]} | "
                f"{row['p8_miou']:.2f} | {row['key_frame_ratio']:.2f} % | {row.get('updates', '-')} | "
                f"{row['up_bytes_per_key_frame']:,.0f} | "
                f"{row['up_bytes_per_frame']:,.0f} | {row['down_bytes_per_frame']:,.0f} | {row['kbps']:,.1f} | "
                f"{'-' if ratio is None else f'{ratio:.2f}'} |")
        lines.append("")
    lines += [f"- {note}" for note in meta["notes"]]
    return "\n".join(lines) + "\n"
