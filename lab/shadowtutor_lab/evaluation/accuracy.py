"""``shadowtutor bench accuracy``: the harness over several scenes, with resumable results.

Each scene is evaluated in the passes of :mod:`shadowtutor_lab.evaluation.passes` (in parallel
worker processes with ``workers > 1``). Each scene's per-frame traces are kept in
``OUT/traces/NAME.json`` together with the configuration that produced them; a rerun with
the same configuration reuses them, so an interrupted run only redoes unfinished scenes.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from shadowtutor.algorithms.params import AlgorithmParams
from shadowtutor.models.checkpoint import load_student
from shadowtutor.models.inference import onnx_available
from shadowtutor.models.precision import TrainingPrecision
from shadowtutor.models.pretrained import default_student_path
from shadowtutor.models.scale import format_size
from shadowtutor.scene_store import DEFAULT_BACKGROUNDS, Scene, SceneError
from shadowtutor_lab.evaluation.harness import SceneEvaluation
from shadowtutor_lab.evaluation.machine import machine_info
from shadowtutor_lab.evaluation.passes import PASSES, ScenePass, run_passes
from shadowtutor_lab.evaluation.plots import plot_scene
from shadowtutor_lab.evaluation.report import write_report
from shadowtutor_lab.evaluation.simulated_link import LinkCodecs
from shadowtutor_lab.evaluation.summary import DEFINITIONS, scene_summary
from shadowtutor_lab.evaluation.trace_store import load_trace, store_trace
from shadowtutor_lab.scenes.footage import FOOTAGE_PRESET_PREFIX
from shadowtutor_lab.scenes.real import REAL_CLIPS, REAL_PRESET_PREFIX, clip_scene, make_real_command

DEFAULT_REAL_TEACHER = "mediapipe"  # labels packaged clips and videos when the run's teacher is "labels"
_LABELLED_PRESETS = (REAL_PRESET_PREFIX, FOOTAGE_PRESET_PREFIX)  # scenes whose labels a real teacher made

log = logging.getLogger(__name__)

Size = tuple[int, int]


@dataclass(frozen=True)
class AccuracyConfig:
    scenes: tuple[Path, ...]
    out_dir: Path
    frames: int | None = None  # None: every frame of each scene
    size: Size | None = None  # None: each scene's own size
    student_size: Size | None = None  # the student's input scale; None: the frame's size
    student: Path | None = None  # None: the packaged pre-trained student
    teacher: str = "labels"
    teacher_options: dict[str, Any] = field(default_factory=dict)
    backend: str = "auto"  # auto: onnx where installed, else torch
    threads: int | None = None
    params: AlgorithmParams = AlgorithmParams()
    precision: TrainingPrecision = "fp32"  # the servers' training arithmetic
    workers: int = 1  # passes run in parallel processes
    resume: bool = True
    progress: bool = True
    command: str = ""
    notes: tuple[str, ...] = ()
    link: LinkCodecs | None = None  # the protocol's codecs on the simulated link (None: the paper's raw accounting)


def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def scene_command(scene: Scene) -> str:
    m = scene.meta
    if m.preset.startswith(_LABELLED_PRESETS):
        return make_real_command(scene)
    frames, fps = (m.source_frames, m.source_fps) if m.resampled else (m.frames, m.fps)
    resample = f" --sample-fps {m.fps:g}" if m.resampled else ""
    backgrounds = f" --backgrounds {m.backgrounds}" if m.backgrounds != DEFAULT_BACKGROUNDS else ""
    cuts = f" --cut-interval {m.cut_interval}" if m.cut_interval is not None else ""
    return (f"shadowtutor scenes make --preset {m.preset} --frames {frames} --seed {m.seed} "
            f"--out {scene.directory} --size {m.width}x{m.height} --fps {fps:g}{resample}{backgrounds}{cuts}")


def open_scenes(paths: Sequence[Path], frames: int | None = None, size: Size | None = None, teacher: str = "labels",
                teacher_options: dict[str, Any] | None = None, progress: bool = True) -> dict[str, Scene]:
    """The scenes by name: each path a scene directory, a packaged clip's name or a video file.

    A clip or a video becomes a scene labelled by ``teacher`` (the real teacher, mediapipe, when that is
    ``labels``), its first ``frames`` frames at ``size``'s width, made once into the scene cache
    (:func:`~shadowtutor_lab.scenes.real.clip_scene`) and named after the file; SceneError for a path that is
    none of these.
    """
    if not paths:
        raise ValueError("no scenes given")
    scenes: dict[str, Scene] = {}
    for path in paths:
        path = Path(path)
        if path.is_dir():
            scene, name = Scene.open(path), path.resolve().name
        else:
            if str(path) not in REAL_CLIPS and not path.is_file():
                raise SceneError(f"{path} is neither a scene directory, a packaged clip ({', '.join(REAL_CLIPS)}) "
                                 "nor a video file")
            labels_only = teacher == "labels"
            directory = clip_scene(str(path), frames, size[0] if size else None,
                                   DEFAULT_REAL_TEACHER if labels_only else teacher, progress=progress,
                                   teacher_options=None if labels_only else teacher_options)
            scene, name = Scene.open(directory), path.stem
        if name in scenes:
            raise ValueError(f"two scenes are named {name!r}: give the scene directories distinct names")
        scenes[name] = scene
    return scenes


def _pretrained_on(metadata: dict[str, Any]) -> set[tuple[str, int]]:
    scenes = metadata.get("pretrain", {}).get("scenes", [])
    return {(str(s["preset"]), int(s["seed"])) for s in scenes}


def run_accuracy(config: AccuracyConfig) -> dict[str, dict[str, Any]]:
    """Evaluate every scene, write the report into ``config.out_dir`` and return ``results.json``'s object."""
    started = time.perf_counter()
    scenes = open_scenes(config.scenes, config.frames, config.size, config.teacher, config.teacher_options,
                         config.progress)
    student_path = Path(config.student) if config.student else default_student_path()
    loaded = load_student(student_path)
    backend = config.backend
    if backend == "auto":
        backend = "onnx" if onnx_available() else "torch"
    frames_of = {name: min(len(s), config.frames or len(s)) for name, s in scenes.items()}
    pretrained_on = _pretrained_on(loaded.metadata)
    student_sha = sha256_of(student_path)
    notes = list(config.notes)
    if config.teacher == "labels":
        real = sorted(n for n, s in scenes.items() if s.meta.preset.startswith(_LABELLED_PRESETS))
        generated = sorted(set(scenes) - set(real))
        if generated:
            notes.append(f"The teacher of {', '.join(generated)} is the scene's ground truth (labels teacher), "
                         "so mIoU is against the truth.")
        if real:
            notes.append(f"The teacher of {', '.join(real)} is the labels a real teacher made of the real clip "
                         "(labels teacher over them; the scene's teacher.json names it), so mIoU is against that "
                         "teacher, not a ground truth.")
    resampled = [f"{n} ({s.meta.source_fps:g} -> {s.meta.fps:g} fps)" for n, s in scenes.items() if s.meta.resampled]
    if resampled:
        notes.append(f"Re-sampled to a lower frame rate (the paper's Table 7): {', '.join(resampled)}.")
    held_out = [n for n, s in scenes.items() if s.meta.backgrounds == "held-out"]
    if held_out:
        notes.append(f"Backgrounds from held-out photos, which pre-training never saw: {', '.join(held_out)}.")
    for name, scene in scenes.items():
        if (scene.meta.preset, scene.meta.seed) in pretrained_on:
            warning = f"scene {name} ({scene.meta.preset}, seed {scene.meta.seed}) was used to pre-train the student"
            log.warning(warning)
            notes.append("WARNING: " + warning)
    plots: dict[str, str] = {}
    meta: dict[str, Any] = {
        "command": config.command,
        "scene_commands": [scene_command(s) for s in scenes.values()],
        "size": "native" if config.size is None else f"{config.size[0]}x{config.size[1]}",
        "student_size": format_size(config.student_size),
        "frames_per_scene": config.frames or "all",
        "teacher": config.teacher,
        "backend": backend,
        "workers": config.workers,
        "threads": config.threads or (1 if config.workers > 1 else torch.get_num_threads()),
        "params": config.params.to_dict(),
        "distill_precision": config.precision,
        "link": None if config.link is None else dataclasses.asdict(config.link),
        "student": {"path": str(student_path), "sha256": student_sha, "metadata": loaded.metadata},
        "machine": machine_info(),
        "definitions": DEFINITIONS,
        "notes": notes,
        "plots": plots,
    }
    fingerprints = {
        name: {
            "scene": dataclasses.asdict(scene.meta), "frames": frames_of[name], "size": config.size,
            "student_sha256": student_sha, "teacher": config.teacher,
            "teacher_options": {k: str(v) for k, v in config.teacher_options.items()},
            "backend": backend, "params": config.params.to_dict(),
            **({"student_size": list(config.student_size)} if config.student_size else {}),
            **({"precision": config.precision} if config.precision != "fp32" else {}),
            **({"link": dataclasses.asdict(config.link)} if config.link is not None else {}),
        }
        for name, scene in scenes.items()
    }
    evaluations: dict[str, SceneEvaluation] = {}
    results: dict[str, dict[str, Any]] = {}

    def finish(name: str, evaluation: SceneEvaluation) -> None:
        scene = scenes[name]
        evaluations[name] = evaluation
        plot_path = plot_scene(evaluation, config.out_dir / "plots" / f"{name}.png",
                               cuts=[c for c in scene.meta.cuts if c < frames_of[name]])
        plots[name] = str(plot_path.relative_to(config.out_dir))
        results[name] = {
            "preset": scene.meta.preset, "seed": scene.meta.seed,
            "camera": scene.meta.camera, "category": scene.meta.category,
            **scene_summary(evaluation),
        }
        ordered = {n: results[n] for n in scenes if n in results}
        write_report(config.out_dir, ordered, meta)

    jobs = []
    for name, scene in scenes.items():
        cached = _cached(config, name, fingerprints[name])
        if cached is not None:
            meta.setdefault("reused_scenes", []).append(name)
            finish(name, cached)
            continue
        jobs += [
            ScenePass(name, scene.directory, settings, frames_of[name], config.size, student_path, config.teacher,
                      config.teacher_options, config.params, backend, config.threads, link=config.link,
                      student_size=config.student_size, precision=config.precision)
            for settings in PASSES
        ]
    partial: dict[str, list[SceneEvaluation]] = {}
    for job, evaluation in run_passes(jobs, config.workers, config.threads or 1, config.progress):
        partial.setdefault(job.name, []).append(evaluation)
        if len(partial[job.name]) == len(PASSES):
            merged = functools.reduce(SceneEvaluation.merge, partial.pop(job.name))
            _store(config, job.name, fingerprints[job.name], merged)
            finish(job.name, merged)
    meta["wall_seconds"] = time.perf_counter() - started
    ordered = {n: results[n] for n in scenes}
    write_report(config.out_dir, ordered, meta)
    return ordered


def _trace_path(config: AccuracyConfig, name: str) -> Path:
    return config.out_dir / "traces" / f"{name}.json"


def _cached(config: AccuracyConfig, name: str, fingerprint: dict[str, Any]) -> SceneEvaluation | None:
    return load_trace(_trace_path(config, name), fingerprint) if config.resume else None


def _store(config: AccuracyConfig, name: str, fingerprint: dict[str, Any], evaluation: SceneEvaluation) -> None:
    store_trace(_trace_path(config, name), fingerprint, evaluation)
