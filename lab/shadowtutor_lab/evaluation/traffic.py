"""``shadowtutor bench traffic``: bytes per key frame against the student's mIoU, per link codec setting.

Each setting (:class:`~shadowtutor_lab.evaluation.simulated_link.LinkCodecs`) runs P-8 on every
scene through the in-process harness with its codecs applied to what crosses the simulated
link, and is compared with the uncompressed setting (raw frames, float32 weights) on the same
frames. Accuracy runs may use a reduced resolution; the frame's share of the bytes is measured
on the scene's frames at 1280x720 instead (the update's size does not depend on resolution),
so a key frame's bytes at 720p are the KEY_FRAME message at 720p plus the mean UPDATE message
of the run. Settings are written ``FRAME[@QUALITY][:SCALE]/WEIGHT_CODECS[/held]`` (``SCALE``: the
key-frame scale, default 1): the weight codecs
as an edge offers them (the server picks as in a real session), ``/held`` for a server that
trains on from the weights the edge holds instead of its own float weights (the real server's
rule), to compare the two.
"""

from __future__ import annotations

import dataclasses
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from shadowtutor.algorithms.params import AlgorithmParams
from shadowtutor.models.inference import onnx_available
from shadowtutor.models.pretrained import default_student_path
from shadowtutor.protocol.codecs import WEIGHT_CODECS, choose_weight_codecs
from shadowtutor.protocol.defaults import DEFAULT_FRAME_CODECS, DEFAULT_FRAME_QUALITY, DEFAULT_WEIGHT_CODECS
from shadowtutor.protocol.errors import ProtocolError
from shadowtutor.protocol.sparse_delta import is_sparse_codec
from shadowtutor.scene_store import Scene
from shadowtutor_lab.evaluation.accuracy import open_scenes, scene_command, sha256_of
from shadowtutor_lab.evaluation.frame_link import FrameLink
from shadowtutor_lab.evaluation.harness import SceneEvaluation
from shadowtutor_lab.evaluation.machine import machine_info
from shadowtutor_lab.evaluation.passes import ScenePass, run_passes
from shadowtutor_lab.evaluation.simulated_link import LinkCodecs
from shadowtutor_lab.evaluation.trace_store import load_trace, store_trace

Size = tuple[int, int]
SETTING = "p8"  # the harness setting measured
FRAME_SIZE_720P: Size = (1280, 720)
FRAME_SAMPLES = 10  # frames per scene encoded at 720p
TARGET_BYTES = 300_000  # per key frame at 720p, on every scene
TARGET_MIOU_POINTS = 1.0  # mean mIoU over the scenes at most this much below the uncompressed setting's
PAPER_BYTES = 3_030_000  # the paper's key frame: 2.637 MB raw frame up + partial float32 weights down
BASELINE = LinkCodecs()
DEFAULT_SWEEP = (
    "jpeg@70/f32", "jpeg@80/f32", "jpeg@90/f32", "webp@80/f32",
    "raw/f16+zstd", "raw/q8delta+zstd,f16+zstd", "raw/q8chdelta+zstd,f16+zstd", "raw/q8delta+zstd,f16+zstd/held",
    # a control: float16 rounding of the server's weights (relative 5e-4) changes nothing a model could
    # notice, yet it sets training on another path; the mIoU differences it shows are chance
    "raw/f16+zstd/held",
)


def parse_setting(spec: str) -> LinkCodecs:
    """``FRAME[@QUALITY][:SCALE]/WEIGHT_CODECS[/held]`` as the link codecs a session would agree on."""
    parts = spec.split("/")
    if len(parts) not in (2, 3) or (len(parts) == 3 and parts[2] != "held"):
        raise ValueError(f"a setting is FRAME[@QUALITY][:SCALE]/WEIGHT_CODECS[/held], got {spec!r}")
    frame, _, scale_text = parts[0].partition(":")
    frame_codec, _, quality_text = frame.partition("@")
    if quality_text and frame_codec not in DEFAULT_FRAME_QUALITY:
        raise ValueError(f"{spec!r}: the {frame_codec} codec takes no quality")
    try:
        quality = int(quality_text) if quality_text else DEFAULT_FRAME_QUALITY.get(frame_codec)
        scale = float(scale_text) if scale_text else 1.0
        weight_codec, delta_codec = choose_weight_codecs([c.strip() for c in parts[1].split(",")], WEIGHT_CODECS)
        return LinkCodecs(frame_codec, quality, weight_codec, delta_codec, train_from_held=len(parts) == 3,
                          key_frame_scale=scale)
    except (ValueError, ProtocolError) as exc:
        raise ValueError(f"{spec!r}: {exc}") from None


def default_setting() -> LinkCodecs:
    """What a session between a default edge agent and a default server agrees on (the first frame codec
    the agent offers, its default weight codecs)."""
    frame = DEFAULT_FRAME_CODECS[0]
    quality = f"@{DEFAULT_FRAME_QUALITY[frame]}" if frame in DEFAULT_FRAME_QUALITY else ""
    return parse_setting(f"{frame}{quality}/{','.join(DEFAULT_WEIGHT_CODECS)}")


def label_of(link: LinkCodecs) -> str:
    frame = link.frame_codec + (f"@{link.frame_quality}" if link.frame_quality is not None else "")
    frame += f" at {link.key_frame_scale:g}x" if link.key_frame_scale != 1.0 else ""
    delta = link.delta_codec
    if delta is not None and is_sparse_codec(delta):
        sparse = link.sparse
        delta += (f" gradient {sparse.fraction:g} every {sparse.every}" if sparse.trains_a_set
                  else f" residual {sparse.fraction:g}")
    weights = link.weight_codec if delta is None else f"{delta} (full: {link.weight_codec})"
    held = ", trained from the held weights" if link.train_from_held else ""
    updates = link.updates
    if updates.gated:
        budget = "" if updates.downlink_bps is None else f", downlink budget {updates.downlink_bps / 1000:g} kbps"
        held += (f", updates gated (gain {updates.min_gain:g} over {updates.window} key frames, at most "
                 f"{updates.max_interval} key frames apart{budget})")
    return f"{frame} / {weights}{held}"


@dataclass(frozen=True)
class TrafficConfig:
    scenes: tuple[Path, ...]
    out_dir: Path  # traces of every run
    settings: tuple[str, ...] = DEFAULT_SWEEP  # the baseline and the defaults are always added
    frames: int | None = None  # None: every frame of each scene
    size: Size | None = None  # accuracy runs at WxH (None: each scene's size)
    student: Path | None = None  # None: the packaged pre-trained student
    backend: str = "auto"
    threads: int | None = None
    params: AlgorithmParams = AlgorithmParams()
    workers: int = 1
    resume: bool = True
    progress: bool = True
    command: str = ""
    notes: tuple[str, ...] = ()


def _settings(specs: Sequence[str]) -> dict[str, LinkCodecs]:
    """Labelled settings, the baseline first and the defaults second, without repeats."""
    links = [BASELINE, default_setting(), *(parse_setting(spec) for spec in specs)]
    return {label_of(link): link for link in dict.fromkeys(links)}


def _trace_path(out_dir: Path, scene: str, label: str) -> Path:
    return out_dir / "traces" / f"{scene}__{re.sub(r'[^A-Za-z0-9@.+-]+', '_', label)}.json"


def frames_at_720p(scene: Scene, frames: int) -> list[np.ndarray]:
    """:data:`FRAME_SAMPLES` frames spread over the first ``frames`` of the scene, at 1280x720."""
    wanted = set(np.linspace(0, frames - 1, min(FRAME_SAMPLES, frames)).round().astype(int).tolist())
    picked = []
    for index, frame in enumerate(scene.frames(FRAME_SIZE_720P)):
        if index in wanted:
            picked.append(frame)
        if index >= max(wanted):
            break
    return picked


def key_frame_message(frames: list[np.ndarray], link: LinkCodecs) -> dict[str, float]:
    """Mean KEY_FRAME message size (bytes) and encoding time (ms) of ``frames`` in the link's frame codec,
    sent in order over one :class:`FrameLink` (a stream codec: one stream of them, the first intra)."""
    sizes, seconds = [], []
    sender = FrameLink(link.frame_codec, link.frame_quality, link.key_frame_scale)
    for index, frame in enumerate(frames):
        start = time.perf_counter()
        sizes.append(sender.send(index, frame, decode=False).message_bytes)
        seconds.append(time.perf_counter() - start)
    return {"bytes": float(np.mean(sizes)), "encode_ms": 1000.0 * float(np.median(seconds))}


def scene_result(evaluation: SceneEvaluation, baseline: SceneEvaluation, frame: dict[str, float]) -> dict[str, Any]:
    """One setting on one scene: mIoU against the baseline's, bytes per key frame at 720p."""
    trace, base = evaluation.traces[SETTING], baseline.traces[SETTING]
    records = trace.records
    update_bytes = float(np.mean([r.bytes_down for r in records]))
    miou, base_miou = 100.0 * float(np.mean(trace.miou)), 100.0 * float(np.mean(base.miou))
    return {
        "miou": miou,
        "miou_uncompressed": base_miou,
        "miou_difference": miou - base_miou,
        "key_frames": len(trace.key_frames),
        "mean_steps": float(np.mean([r.steps for r in records])),
        "frame_bytes_720p": frame["bytes"],
        "frame_encode_ms_720p": frame["encode_ms"],
        "update_bytes": update_bytes,
        "update_bytes_max": max(r.bytes_down for r in records),
        "key_frame_bytes_720p": frame["bytes"] + update_bytes,
    }


def _mean_over_scenes(scenes: dict[str, dict[str, Any]]) -> dict[str, float]:
    keys = ("miou", "miou_difference", "frame_bytes_720p", "frame_encode_ms_720p", "update_bytes",
            "key_frame_bytes_720p")
    summary = {key: float(np.mean([s[key] for s in scenes.values()])) for key in keys}
    summary["worst_miou_difference"] = min(s["miou_difference"] for s in scenes.values())
    summary["largest_key_frame_bytes_720p"] = max(s["key_frame_bytes_720p"] for s in scenes.values())
    return summary


def verdict(result: dict[str, Any]) -> dict[str, Any]:
    """Does a setting meet the target (bytes on every scene, mIoU over the scenes), and by how much does it miss."""
    mean = result["mean"]
    bytes_over = mean["largest_key_frame_bytes_720p"] - TARGET_BYTES
    miou_short = -TARGET_MIOU_POINTS - mean["miou_difference"]
    return {
        "bytes_met": bytes_over <= 0,
        "miou_met": miou_short <= 0,
        "met": bytes_over <= 0 and miou_short <= 0,
        "bytes_over_target": max(0.0, bytes_over),
        "miou_points_short": max(0.0, miou_short),
        "fraction_of_paper": mean["key_frame_bytes_720p"] / PAPER_BYTES,
    }


def run_traffic(config: TrafficConfig) -> dict[str, Any]:
    """Run every setting on every scene (reusing stored traces) and return the results object."""
    started = time.perf_counter()
    scenes = open_scenes(config.scenes)
    settings = _settings(config.settings)
    student_path = Path(config.student) if config.student else default_student_path()
    student_sha = sha256_of(student_path)
    backend = config.backend if config.backend != "auto" else ("onnx" if onnx_available() else "torch")
    frames_of = {name: min(len(s), config.frames or len(s)) for name, s in scenes.items()}

    def fingerprint(name: str, link: LinkCodecs) -> dict[str, Any]:
        return {"scene": dataclasses.asdict(scenes[name].meta), "frames": frames_of[name], "size": config.size,
                "student_sha256": student_sha, "backend": backend, "params": config.params.to_dict(),
                "setting": SETTING, "link": dataclasses.asdict(link)}

    evaluations: dict[tuple[str, str], SceneEvaluation] = {}
    jobs: dict[str, tuple[str, str]] = {}
    for name in scenes:
        for label, link in settings.items():
            path = _trace_path(config.out_dir, name, label)
            cached = load_trace(path, fingerprint(name, link)) if config.resume else None
            if cached is not None:
                evaluations[name, label] = cached
            else:
                jobs[f"{name} | {label}"] = (name, label)
    passes = [
        ScenePass(job, scenes[name].directory, (SETTING,), frames_of[name], config.size, student_path,
                  params=config.params, backend=backend, threads=config.threads, link=settings[label])
        for job, (name, label) in jobs.items()
    ]
    finished = run_passes(passes, config.workers, config.threads or 1, config.progress) if passes else ()
    for job, evaluation in finished:
        name, label = jobs[job.name]
        store_trace(_trace_path(config.out_dir, name, label), fingerprint(name, settings[label]), evaluation)
        evaluations[name, label] = evaluation

    samples = {name: frames_at_720p(scene, frames_of[name]) for name, scene in scenes.items()}
    baseline_label = label_of(BASELINE)
    results = []
    for label, link in settings.items():
        per_scene = {
            name: scene_result(evaluations[name, label], evaluations[name, baseline_label],
                               key_frame_message(samples[name], link))
            for name in scenes
        }
        result = {"label": label, "link": dataclasses.asdict(link), "scenes": per_scene,
                  "mean": _mean_over_scenes(per_scene)}
        result["verdict"] = verdict(result)
        results.append(result)
    return {
        "meta": {
            "command": config.command,
            "scene_commands": [scene_command(s) for s in scenes.values()],
            "size": "native" if config.size is None else f"{config.size[0]}x{config.size[1]}",
            "frames_per_scene": frames_of,
            "setting": "P-8",
            "teacher": "labels (each scene's ground truth)",
            "backend": backend,
            "workers": config.workers,
            "frame_samples": FRAME_SAMPLES,
            "params": config.params.to_dict(),
            "student": {"path": str(student_path), "sha256": student_sha},
            "machine": machine_info(),
            "wall_seconds": time.perf_counter() - started,
            "runs": len(evaluations),
            "runs_reused": len(evaluations) - len(passes),
            "run_seconds": sum(evaluation.seconds for evaluation in evaluations.values()),
            "defaults": {"frame_codecs": list(DEFAULT_FRAME_CODECS), "frame_quality": DEFAULT_FRAME_QUALITY,
                         "weight_codecs": list(DEFAULT_WEIGHT_CODECS)},
            "notes": list(config.notes),
        },
        "target": {"key_frame_bytes_720p": TARGET_BYTES, "miou_points": TARGET_MIOU_POINTS,
                   "paper_key_frame_bytes": PAPER_BYTES},
        "baseline": baseline_label,
        "defaults": label_of(default_setting()),
        "settings": results,
    }
