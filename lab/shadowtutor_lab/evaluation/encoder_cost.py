"""``shadowtutor bench key-frame-encoder``: the edge's frame rate with and without encoding its key frames.

The edge agent encodes a key frame on the thread that runs its student
(:class:`~edge_agent.frame_encoder.FrameEncoder`, called when the client loop submits it). This
bench runs the edge's student over a scene's frames twice in one run, alternating blocks of
``block`` frames between the two arms so that a change in the machine's load falls on both: *without*
(the student alone) and *with* (the student, and every ``stride``-th frame also encoded as the next
frame of the session's key-frame stream). Each arm's frame rate is its frames over its own seconds;
the result is their ratio.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from edge_agent.frame_encoder import FrameEncoder
from shadowtutor.acceleration.labellers.edge_student import edge_student
from shadowtutor.acceleration.labellers.registry import LabellerSpec
from shadowtutor.models.checkpoint import load_student
from shadowtutor.models.inference import onnx_available
from shadowtutor.models.pretrained import default_student_path
from shadowtutor.scene_store import Scene
from shadowtutor_lab.evaluation.machine import machine_info


@dataclass(frozen=True)
class EncoderCostConfig:
    scene: Path
    frames: int = 200  # frames per arm
    stride: int = 10  # every stride-th frame is a key frame (10: the 720p scene's 9.8 % key frames)
    block: int = 20  # frames per block; the arms alternate blocks
    codec: str = "h264"
    scale: float = 1.0
    backend: str = "auto"
    threads: int | None = 1
    command: str = ""


def measure(config: EncoderCostConfig) -> dict[str, Any]:
    """Both arms' frame rates, the ratio with/without, and the encoder's median milliseconds per key frame.
    ValueError for a stride, block or frame count below 1."""
    if min(config.frames, config.stride, config.block) < 1:
        raise ValueError("frames, stride and block are at least 1")
    scene = Scene.open(config.scene)
    backend = config.backend if config.backend != "auto" else ("onnx" if onnx_available() else "torch")
    student = edge_student(LabellerSpec(backend=backend, change_based=None, threads=config.threads),
                           load_student(default_student_path()).model)
    frames = list(itertools.islice(itertools.cycle(scene.frames()), 0, 2 * config.block))
    encoder = FrameEncoder(scale=config.scale)
    student.infer(frames[0])
    encoder.encode(frames[0], config.codec, "warm-up")
    seconds = {"without": 0.0, "with": 0.0}
    counts = {"without": 0, "with": 0}
    encode_ms: list[float] = []
    position = 0
    while counts["with"] < config.frames:
        for arm in ("without", "with"):
            for _ in range(min(config.block, config.frames - counts[arm])):
                frame = frames[position % len(frames)]
                position += 1
                start = time.perf_counter()
                student.infer(frame)
                if arm == "with" and counts[arm] % config.stride == 0:
                    encoded_at = time.perf_counter()
                    encoder.encode(frame, config.codec, "session")
                    encode_ms.append(1000.0 * (time.perf_counter() - encoded_at))
                seconds[arm] += time.perf_counter() - start
                counts[arm] += 1
    fps = {arm: counts[arm] / seconds[arm] for arm in seconds}
    encode_ms.sort()
    return {
        "command": config.command,
        "scene": str(config.scene),
        "size": [scene.meta.width, scene.meta.height],
        "codec": config.codec,
        "scale": config.scale,
        "backend": backend,
        "threads": config.threads,
        "frames_per_arm": config.frames,
        "key_frame_every": config.stride,
        "block": config.block,
        "fps_without": fps["without"],
        "fps_with": fps["with"],
        "fps_ratio": fps["with"] / fps["without"],
        "drop_percent": 100.0 * (1.0 - fps["with"] / fps["without"]),
        "encode_ms_median": encode_ms[len(encode_ms) // 2],
        "key_frames_encoded": len(encode_ms),
        "machine": machine_info(),
    }
