"""``shadowtutor evaluate``: how ShadowTutor does on one's own footage, at which settings, on how many servers.

For each source, :func:`evaluate_footage`

1. labels its first frames with the teacher, once (:func:`~shadowtutor_lab.scenes.footage.footage_scene`:
   a scene in the cache under the content hash of the frames and the teacher);
2. runs the harness (:mod:`shadowtutor_lab.evaluation.harness`) over that scene with the configured
   parameters (default: the paper's) and link codecs: Wild (the pre-trained student alone) and P-8
   (ShadowTutor as deployed: partial distillation, updates landing 8 frames after their key frame),
   keeping the label maps of a few frames for the strip;
3. labels every frame as naive offloading would (the teacher on the frame as the frame codec delivers
   it to the server), measured against the teacher on the frame itself: the baseline is naive offloading
   as a camera does it, every frame as one H.264 stream (:data:`NAIVE_LINKS`), with per-frame JPEG as a
   second row;
4. runs P-8 over the THRESHOLD x MIN_STRIDE grid on the same cached labels
   (:mod:`shadowtutor_lab.evaluation.operating_point`: Pareto front and recommendation);
5. plans capacity (:mod:`shadowtutor_lab.capacity.plan`) from the recommended point and the server
   profiles, with the analytic bounds for this machine as the edge (its measured ``t_si``).

Bytes are whole protocol messages at the evaluated frame size (KEY_FRAME and UPDATE for ShadowTutor,
KEY_FRAME and LABELS for naive offloading), per frame averaged over the run, per hour and per second at
the footage's frame rate, and ShadowTutor's against H.264 offloading's as "x fewer" ratios;
ShadowTutor's once-per-session model download (the handshake) is not included.
"""

from __future__ import annotations

import dataclasses
import itertools
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from shadowtutor.algorithms.metrics import miou
from shadowtutor.algorithms.params import AlgorithmParams, threshold_fields
from shadowtutor.models.precision import TrainingPrecision
from shadowtutor.scene_store import Scene
from shadowtutor_lab.capacity.plan import CameraLoad, cameras_per_link, edge_bounds, server_capacity
from shadowtutor_lab.capacity.profile import ServerProfile
from shadowtutor_lab.evaluation.frame_link import FrameLink
from shadowtutor_lab.evaluation.harness import WILD, SceneEvaluation, SettingTrace
from shadowtutor_lab.evaluation.machine import machine_info
from shadowtutor_lab.evaluation.operating_point import Point, Target, pareto_front, recommend, threshold_setting
from shadowtutor_lab.evaluation.passes import ScenePass, run_pass, run_passes
from shadowtutor_lab.evaluation.simulated_link import LinkCodecs
from shadowtutor_lab.evaluation.traffic import label_of
from shadowtutor_lab.scenes.footage import Footage, footage_scene

Size = tuple[int, int]
SHADOWTUTOR = "p8"  # the harness setting that is ShadowTutor as deployed
SECONDS_PER_HOUR = 3600.0
T_SI_FRAMES = 10  # frames timed for the edge's t_si (after one warm-up frame)
# naive offloading's frame links by traffic key: H.264 streaming (the baseline) and JPEG per frame
NAIVE_LINKS = {"naive": ("h264", None), "naive_jpeg": ("jpeg", 80)}


@dataclass(frozen=True)
class EvaluateConfig:
    sources: tuple[str, ...]
    out_dir: Path
    frames: int = 150
    size: Size | None = None  # None: the footage's own size, scaled down to max_width
    max_width: int | None = 320
    student_size: Size | None = None
    student: Path | None = None
    teacher: str = "mediapipe"
    teacher_options: dict[str, Any] = field(default_factory=dict)
    backend: str = "auto"
    threads: int | None = None
    params: AlgorithmParams = AlgorithmParams()
    workers: int = 1
    resume: bool = True  # reuse cached teacher labels
    progress: bool = True
    command: str = ""
    notes: tuple[str, ...] = ()
    precision: TrainingPrecision = "fp32"  # the servers' training arithmetic
    codecs: LinkCodecs = LinkCodecs()
    thresholds: tuple[float | str, ...] = (0.5, 0.65, 0.8, "auto")  # --threshold settings: numbers or "auto"
    min_strides: tuple[int, ...] = (8, 16)
    target: Target = Target("key_frames", 5.0)
    profiles: tuple[ServerProfile, ...] = ()
    link_bps: float = 80e6
    camera: str = "fixed"
    change_based: bool = False
    # a video damaged before its end: evaluate the frames read (else an error)
    accept_short: bool = False
    strip: int = 3
    cache_dir: Path | None = None


@dataclass
class StripFrame:
    """One moment of the strip: the frame and the label maps of teacher, ShadowTutor and Wild."""

    index: int
    why: str
    labels: dict[str, np.ndarray]
    frame: np.ndarray | None = None


@dataclass
class FootageResult:
    """Everything measured on one source: ``numbers`` is JSON-ready; ``strip`` holds images for the report."""

    numbers: dict[str, Any]
    strip: list[StripFrame]


def _per_frame_bytes(trace: SettingTrace, frames: int) -> tuple[float, float]:
    up = sum(r.bytes_up for r in trace.records)
    down = sum(r.bytes_down for r in trace.records)
    return up / frames, down / frames


def _point(params: AlgorithmParams, trace: SettingTrace, frames: int, fps: float) -> Point:
    up, _ = _per_frame_bytes(trace, frames)
    steps = [r.steps for r in trace.records]
    return Point(params.threshold, params.min_stride, 100.0 * len(trace.key_frames) / frames,
                 100.0 * float(np.mean(trace.miou)), 8.0 * up * fps, float(np.mean(trace.strides)),
                 float(np.mean(steps)) if steps else None, params.threshold_policy)


def sweep_params(base: AlgorithmParams, threshold: float | str, min_stride: int) -> AlgorithmParams:
    """``base`` at one grid point: the THRESHOLD setting (a number, or ``auto`` from the default starting value,
    as ``--threshold auto`` gives) and MIN_STRIDE."""
    fixed = base.replace(threshold=AlgorithmParams().threshold, threshold_policy="fixed")
    return fixed.replace(min_stride=min_stride, **threshold_fields(threshold))


def _key(params: AlgorithmParams) -> tuple[str, int]:
    """The grid point ``params`` runs (as :attr:`Point.key`)."""
    return threshold_setting(params.threshold, params.threshold_policy), params.min_stride


def _traffic(up: float, down: float, fps: float) -> dict[str, float]:
    return {"up_bytes_per_frame": up, "down_bytes_per_frame": down,
            "up_bytes_per_hour": up * fps * SECONDS_PER_HOUR, "down_bytes_per_hour": down * fps * SECONDS_PER_HOUR,
            "up_bps": 8.0 * up * fps, "down_bps": 8.0 * down * fps}


def _strip_moments(frames: int, count: int) -> list[int]:
    """``count`` frames spread evenly inside the run (not the very first, which is a key frame)."""
    if count <= 0:
        return []
    return sorted({int(round(x)) for x in np.linspace(0, frames - 1, count + 2)[1:-1]})


@dataclass(frozen=True)
class NaiveRun:
    """Naive offloading over one frame link: per-frame mIoU against the teacher, mean bytes per frame."""

    miou: list[float]
    up: float
    down: float


def naive_offloading(scene: Scene, frames: int, teacher: Any, links: dict[str, FrameLink],
                     progress: bool) -> dict[str, NaiveRun]:
    """Naive offloading over each of ``links`` (by name), in one pass over the first ``frames`` frames: every
    frame crosses the link (a KEY_FRAME message; a stream codec sends them as one stream), the server's
    teacher labels the decoded frame, and the labels come back as a LABELS message (PNG); each frame's
    mIoU is measured against the teacher on the frame itself."""
    from shadowtutor.progress import progress_bar
    from shadowtutor.protocol.codecs import encode_labels
    from shadowtutor.protocol.messages import Labels, encode
    from shadowtutor.teachers.class_maps import checked_class_lut
    from shadowtutor.teachers.labels import LabelsTeacher

    stored = LabelsTeacher(scene.directory)
    names = tuple(scene.meta.class_names)
    num_classes = len(names)
    lut = None if tuple(teacher.class_names) == names else checked_class_lut(teacher.class_names, names, teacher.name)
    scores: dict[str, list[float]] = {name: [] for name in links}
    up = dict.fromkeys(links, 0)
    down = dict.fromkeys(links, 0)
    frames_iter = scene.frames()
    for index in progress_bar(range(frames), desc="naive offloading", unit="frame", disable=not progress,
                      dynamic_ncols=True):
        frame = next(frames_iter)
        reference = stored.label(frame, index)
        for name, link in links.items():
            delivered = link.send(index, frame)
            up[name] += delivered.message_bytes
            height, width = delivered.frame.shape[:2]
            labels = teacher.label(delivered.frame, index)
            labels = labels if lut is None else lut[labels]
            down[name] += len(encode(Labels(
                seq=index, frame_index=index, codec="png", width=width, height=height,
                payload=encode_labels(labels, "png"),
            )))
            scores[name].append(miou(labels, reference, num_classes))
    return {name: NaiveRun(scores[name], up[name] / frames, down[name] / frames) for name in links}


def against(ours: dict[str, float], baseline: dict[str, float]) -> dict[str, float | None]:
    """How many times fewer bytes ``ours`` sends than ``baseline`` (:func:`_traffic` dicts) up, down and
    both together; None where ours sends nothing."""
    up, down = "up_bytes_per_frame", "down_bytes_per_frame"
    pairs = {"up": (ours[up], baseline[up]), "down": (ours[down], baseline[down]),
             "both": (ours[up] + ours[down], baseline[up] + baseline[down])}
    return {key: base / mine if mine else None for key, (mine, base) in pairs.items()}


def measure_t_si(scene: Scene, student: Any, config: EvaluateConfig, backend: str) -> float:
    """Seconds per frame of the edge's student on this machine: the median of :data:`T_SI_FRAMES` frames after a
    warm-up frame (fewer in a shorter scene)."""
    from shadowtutor.acceleration.change_based.backend import ChangeBasedOptions
    from shadowtutor.acceleration.labellers.edge_student import edge_student
    from shadowtutor.acceleration.labellers.registry import LabellerSpec

    change_based = ChangeBasedOptions() if config.change_based else None
    spec = LabellerSpec(backend=backend, change_based=change_based, threads=config.threads)
    edge = edge_student(spec, student, config.student_size)
    seconds = []
    for frame in itertools.islice(scene.frames(), T_SI_FRAMES + 1):
        start = time.perf_counter()
        edge.infer(frame)
        seconds.append(time.perf_counter() - start)
    return float(np.median(seconds[1:] or seconds))  # the first frame warms up, unless it is the only one


def _capacity(
    config: EvaluateConfig,
    load: CameraLoad,
    t_si: float,
    key_frame_bytes: float,
    frames: int,
    trace: SettingTrace,
    params: AlgorithmParams,
) -> dict[str, Any]:
    steps = float(sum(r.steps for r in trace.records))
    servers = []
    for profile in config.profiles:
        capacity = server_capacity(profile, load)
        size = profile.sizes[profile.nearest_size(load.size)]
        bounds = edge_bounds(
            t_si,
            size,
            key_frame_bytes,
            config.link_bps,
            frames,
            len(trace.key_frames),
            steps,
            params.min_stride,
            params.max_stride,
            params.max_updates,
        )
        servers.append({**capacity.to_dict(), "measured": profile.measured, "bounds": bounds.to_dict()})
    return {
        "camera": {
            **dataclasses.asdict(load),
            "key_frames_per_second": load.key_frames_per_second,
            "uplink_bytes_per_second": load.uplink_bytes_per_second,
        },
        "servers": servers,
        "link_bps": config.link_bps,
        "cameras_per_link": cameras_per_link(load, config.link_bps),
        "t_si": t_si,
        "key_frame_bytes": key_frame_bytes,
    }


def evaluate_footage(source: str, config: EvaluateConfig, student_path: Path, backend: str) -> FootageResult:
    """Evaluate one source (steps 1-5 of the module docstring)."""
    from shadowtutor.acceleration.change_based.backend import ChangeBasedOptions
    from shadowtutor.models.checkpoint import load_student
    from shadowtutor.progress import progress_bar
    from shadowtutor.teachers import build_teacher

    started = time.perf_counter()
    footage: Footage = footage_scene(
        source,
        config.frames,
        config.size,
        config.max_width,
        config.teacher,
        config.teacher_options,
        config.camera,
        config.cache_dir,
        config.progress,
        reuse=config.resume,
        accept_short=config.accept_short,
    )
    scene = Scene.open(footage.directory)
    frames, fps, name = len(scene), scene.meta.fps, footage_names([source])[0]
    change_based = ChangeBasedOptions() if config.change_based else None

    def job(settings: tuple[str, ...], params: AlgorithmParams, label: str) -> ScenePass:
        return ScenePass(
            label,
            footage.directory,
            settings,
            frames,
            None,
            student_path,
            params=params,
            backend=backend,
            threads=config.threads,
            link=config.codecs,
            student_size=config.student_size,
            change_based=change_based,
            precision=config.precision,
        )

    moments = _strip_moments(frames, config.strip)
    kept: dict[int, dict[str, np.ndarray]] = {}
    worst: list[Any] = [2.0, -1, None]  # P-8's worst frame: mIoU, index, label maps

    def keep(index: int, labels: dict[str, np.ndarray]) -> None:
        if index in moments:
            kept[index] = {key: value.copy() for key, value in labels.items()}
        score = miou(labels[SHADOWTUTOR], labels["teacher"], len(scene.meta.class_names))
        if score < worst[0]:
            worst[:] = [score, index, {key: value.copy() for key, value in labels.items()}]

    with progress_bar(
        total=frames, desc="ShadowTutor and Wild", unit="frame", disable=not config.progress, dynamic_ncols=True
    ) as bar:
        main: SceneEvaluation = run_pass(job((WILD, SHADOWTUTOR), config.params, name), bar.update, keep)
    teacher = build_teacher(config.teacher, **config.teacher_options)
    links = {name: FrameLink(codec, quality, fps=fps) for name, (codec, quality) in NAIVE_LINKS.items()}
    naive_runs = naive_offloading(scene, frames, teacher, links, config.progress)
    naive = naive_runs["naive"].miou
    shadow = main.traces[SHADOWTUTOR]
    up, down = _per_frame_bytes(shadow, frames)

    grid = [sweep_params(config.params, t, m) for m in config.min_strides for t in config.thresholds]
    traces = {_key(config.params): shadow}
    sweep_jobs = [
        job((SHADOWTUTOR,), params, "{} MIN_STRIDE {}".format(*_key(params)))
        for params in {_key(p): p for p in grid if _key(p) not in traces}.values()
    ]
    ran = {_key(config.params): config.params}
    for done, evaluation in run_passes(sweep_jobs, config.workers, config.threads or 1, config.progress):
        traces[_key(done.params)] = evaluation.traces[SHADOWTUTOR]
        ran[_key(done.params)] = done.params
    points = [_point(params, traces[key], frames, fps) for key, params in ran.items()]  # the configured first
    recommendation = recommend(points, config.target)
    chosen = recommendation.point
    chosen_trace = traces[chosen.key]
    chosen_params = ran[chosen.key]

    loaded = load_student(student_path)
    t_si = measure_t_si(scene, loaded.model, config, backend)
    chosen_up, chosen_down = _per_frame_bytes(chosen_trace, frames)
    records = chosen_trace.records
    key_frame_bytes = float(np.mean([r.bytes_up + r.bytes_down for r in records]))
    load = CameraLoad(fps, chosen.key_frame_ratio / 100.0, chosen.mean_steps, scene.meta.size, chosen_up, chosen_down)
    strip = [StripFrame(i, "evenly spaced", kept[i]) for i in moments if i in kept]
    if worst[1] >= 0 and worst[1] not in moments:
        strip.append(StripFrame(worst[1], "ShadowTutor's worst frame", worst[2]))
    strip.sort(key=lambda s: s.index)
    wanted = {s.index: s for s in strip}
    for index, frame in enumerate(scene.frames()):
        if index in wanted:
            wanted[index].frame = frame
        if index >= max(wanted, default=-1):
            break

    numbers = {
        "source": source,
        "scene": str(footage.directory),
        "content_sha256": footage.content_sha256,
        "labels_from_cache": footage.cached,
        "native_size": list(footage.native_size),
        "size": list(scene.meta.size),
        "fps": fps,
        "frames": frames,
        "summary": {
            "wild_miou": 100.0 * float(np.mean(main.traces[WILD].miou)),
            "shadowtutor_miou": 100.0 * float(np.mean(shadow.miou)),
            "naive_miou": 100.0 * float(np.mean(naive)),
            "naive_jpeg_miou": 100.0 * float(np.mean(naive_runs["naive_jpeg"].miou)),
            "key_frame_ratio": 100.0 * len(shadow.key_frames) / frames,
            "mean_stride": float(np.mean(shadow.strides)),
            "mean_distill_steps": float(np.mean([r.steps for r in shadow.records])) if shadow.records else None,
        },
        "per_frame": {
            "wild_miou": [100.0 * v for v in main.traces[WILD].miou],
            "shadowtutor_miou": [100.0 * v for v in shadow.miou],
            "naive_miou": [100.0 * v for v in naive],
            "stride": list(shadow.strides),
            "key_frames": list(shadow.key_frames),
        },
        "traffic": {
            "codecs": label_of(config.codecs),
            "shadowtutor": _traffic(up, down, fps),
            **{name: _traffic(run.up, run.down, fps) for name, run in naive_runs.items()},
            "naive_codecs": {name: links[name].label for name in naive_runs},
            "x_fewer_than_h264": against(
                _traffic(up, down, fps), _traffic(naive_runs["naive"].up, naive_runs["naive"].down, fps)
            ),
        },
        "sweep": {
            "thresholds": [str(t) for t in config.thresholds],
            "min_strides": list(config.min_strides),
            "points": [p.to_dict() for p in points],
            "pareto": [p.to_dict() for p in pareto_front(points)],
            "recommendation": recommendation.to_dict(),
        },
        "capacity": _capacity(config, load, t_si, key_frame_bytes, frames, chosen_trace, chosen_params),
        "strip": [{"frame": s.index, "why": s.why} for s in strip],
        "seconds": time.perf_counter() - started,
    }
    return FootageResult(numbers, strip)


def evaluate(config: EvaluateConfig) -> tuple[dict[str, Any], dict[str, list[StripFrame]]]:
    """Evaluate every source; return the JSON-ready results and each source's strip (by source)."""
    from shadowtutor.models.inference import onnx_available
    from shadowtutor.models.pretrained import default_student_path
    from shadowtutor_lab.evaluation.accuracy import sha256_of

    if not config.sources:
        raise ValueError("no footage given")
    names = footage_names(config.sources)
    if len(set(names)) != len(names):
        raise ValueError(f"two sources share a name ({', '.join(names)}): give them distinct file names")
    started = time.perf_counter()
    student_path = Path(config.student) if config.student else default_student_path()
    backend = config.backend if config.backend != "auto" else ("onnx" if onnx_available() else "torch")
    results: dict[str, Any] = {}
    strips: dict[str, list[StripFrame]] = {}
    for source, name in zip(config.sources, names, strict=True):
        result = evaluate_footage(source, config, student_path, backend)
        results[name] = result.numbers
        strips[name] = result.strip
    meta = {
        "command": config.command,
        "teacher": config.teacher,
        "teacher_options": {k: str(v) for k, v in config.teacher_options.items()},
        "backend": backend,
        "student": {"path": str(student_path), "sha256": sha256_of(student_path)},
        "student_size": None if config.student_size is None else list(config.student_size),
        "change_based": config.change_based,
        "params": config.params.to_dict(),
        "codecs": dataclasses.asdict(config.codecs),
        "target": {**dataclasses.asdict(config.target), "text": config.target.describe()},
        "profiles": [p.to_dict() for p in config.profiles],
        "link_bps": config.link_bps,
        "machine": machine_info(),
        "notes": list(config.notes),
        "wall_seconds": time.perf_counter() - started,
    }
    return {"meta": meta, "videos": results}, strips


def footage_names(sources: Sequence[str]) -> list[str]:
    """The names the report gives the sources: a file's name, a camera's or stream's text."""
    return [Path(s).name or s for s in sources]
