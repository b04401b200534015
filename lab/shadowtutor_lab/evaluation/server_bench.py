"""``shadowtutor bench server``: the server's teaching throughput in-process, with no network.

The server's real models at work (:class:`~services.server.teaching.models.TeachingModels`: its
teacher queue, distillation engine and per-session distillers, from the same settings as
``shadowtutor serve``) are driven by N concurrent sessions in one event loop. Each session keeps one
key frame in flight (the paper's client loop): it submits a key frame, waits for the answer, submits
the next. A *stage* says what a key frame costs the server:

* ``teacher``: the teacher labels it;
* ``distill``: Algorithm 1 on the session's student, with labels known up front;
* ``both``: the teacher, then Algorithm 1 on its labels (what a key frame costs a real server).

Per (frame size, sessions, stage, engine) the bench warms up, then counts the key frames answered
in a measured window (at least the seconds asked for, and until every session has two key frames
answered in it, at most :data:`WINDOW_CAP` times the seconds asked for): key frames per second
(:func:`window_rate`: per session, from its first answer in the window to its last, so that a window
shorter than a few batches does not count one batch more or less by its phase),
per-key-frame latency (p50/p95, from submission to answer), the mean steps per key frame, and the
GPU's busy fraction sampled by NVML where present.
Frames are generated: a textured background with moving objects of the student's classes; the
labels are exact, so with the built-in ``synthetic`` teacher the ``teacher`` stage costs nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import statistics
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from shadowtutor.classes import LVS_CLASSES, background_index
from shadowtutor.heap import startup_heap_frozen
from shadowtutor.teachers.base import TeacherBase
from shadowtutor_lab.capacity.profile import SCHEMA

STAGES = ("teacher", "distill", "both")
FRAMES_PER_SIZE = 8
WINDOW_CAP = 10  # a measured window lasts at most this many times the seconds asked for


@dataclass(frozen=True)
class BenchPoint:
    """One measured configuration."""

    size: tuple[int, int]  # (W, H)
    sessions: int
    stage: str
    engine: str
    key_frames: int  # answered in the measured window
    seconds: float
    key_frames_per_s: float
    p50_ms: float | None
    p95_ms: float | None
    mean_steps: float | None  # distillation steps per key frame (None for the teacher stage)
    gpu_busy: float | None  # NVML's busy fraction over the window; None where no GPU is monitored

    def row(self) -> dict[str, Any]:
        data = asdict(self)
        data["size"] = f"{self.size[0]}x{self.size[1]}"
        return data


@dataclass
class SyntheticScene:
    """Generated key frames ``(H, W, 3)`` BGR uint8 and their exact labels, ``FRAMES_PER_SIZE`` per size."""

    class_names: tuple[str, ...]
    frames: dict[tuple[int, int], list[np.ndarray]] = field(default_factory=dict)
    labels: dict[tuple[int, int], list[np.ndarray]] = field(default_factory=dict)

    def add_size(self, size: tuple[int, int], seed: int = 0) -> None:
        width, height = size
        rng = np.random.default_rng(seed)
        background = background_index(self.class_names)
        objects = [c for c in range(len(self.class_names)) if c != background]
        base = rng.integers(40, 216, (height // 8 + 1, width // 8 + 1, 3), dtype=np.uint8)
        texture = np.kron(base, np.ones((8, 8, 1), np.uint8))[:height, :width]
        frames, labels = [], []
        boxes = [(rng.uniform(0.05, 0.7), rng.uniform(0.05, 0.7), rng.uniform(0.1, 0.25), objects[i % len(objects)])
                 for i in range(5)]
        for index in range(FRAMES_PER_SIZE):
            frame = texture.copy()
            label = np.full((height, width), background, np.uint8)
            for number, (x, y, extent, cls) in enumerate(boxes):
                shift = 0.02 * index * (1 if number % 2 else -1)
                x0 = int(np.clip(x + shift, 0, 0.9) * width)
                y0 = int(y * height)
                x1, y1 = min(width, x0 + int(extent * width)), min(height, y0 + int(extent * height))
                frame[y0:y1, x0:x1] = (30 + 40 * cls) % 256, 200 - 15 * cls, 60 + 20 * number
                label[y0:y1, x0:x1] = cls
            frames.append(frame)
            labels.append(label)
        self.frames[size], self.labels[size] = frames, labels


class SyntheticTeacher(TeacherBase):
    """A teacher that knows the generated scene's labels (the frame index says which); costs nothing."""

    name = "synthetic"
    device = "cpu"

    def __init__(self, scene: SyntheticScene) -> None:
        self.scene = scene
        self.class_names = scene.class_names

    def _label_batch(self, frames: list[np.ndarray], frame_indices: list[int] | None) -> list[np.ndarray]:
        indices = [0] * len(frames) if frame_indices is None else frame_indices
        return [
            self.scene.labels[(frame.shape[1], frame.shape[0])][index % FRAMES_PER_SIZE]
            for frame, index in zip(frames, indices, strict=True)
        ]


def _percentile(values: Sequence[float], q: float) -> float | None:
    if not values:
        return None
    return float(np.percentile(np.asarray(values), q))


def window_rate(answer_times: Sequence[Sequence[float]], seconds: float) -> float:
    """Key frames per second from the times each session's key frames were answered in a window of ``seconds``:
    per session, its answers after its first over the time from its first to its last, summed over sessions.
    Exact for a closed loop answered in periodic batches whatever the window's phase, where answers counted
    over the window's length are off by up to a batch. Where a session has fewer than two answers (or two at
    one instant), all answers over ``seconds``."""
    if answer_times and all(len(t) >= 2 and t[-1] > t[0] for t in answer_times):
        return sum((len(t) - 1) / (t[-1] - t[0]) for t in answer_times)
    return sum(len(t) for t in answer_times) / seconds


@dataclass
class _Window:
    """What one point's measured window saw."""

    seconds: float
    answer_times: list[list[float]]  # per session, when its key frames were answered in the window
    latencies: list[float]  # of the key frames both submitted and answered in the window
    steps: list[int]  # of the key frames answered in the window
    gpu_busy: float | None

    @property
    def answered(self) -> int:
        return sum(len(times) for times in self.answer_times)


async def _measure(
    models: Any, scene: SyntheticScene, size: tuple[int, int], sessions: int, stage: str, warmup_s: float,
    seconds: float, device: Any,
) -> _Window:
    """Run ``sessions`` closed-loop sessions and measure a window: ``seconds`` long, longer until every session
    has two key frames answered in it (for :func:`window_rate`), at most ``WINDOW_CAP * seconds``."""
    frames, labels = scene.frames[size], scene.labels[size]
    distillers = [models.new_distiller() for _ in range(sessions)] if stage != "teacher" else []
    window_start: float | None = None
    answer_times: list[list[float]] = [[] for _ in range(sessions)]
    latencies: list[float] = []
    steps: list[int] = []
    stop = asyncio.Event()
    enough = asyncio.Event()  # every session has two key frames answered in the window
    short = set(range(sessions))  # the sessions with fewer

    async def session(number: int) -> None:
        index = number
        while not stop.is_set():
            frame_index = index % FRAMES_PER_SIZE
            frame = frames[frame_index]
            start = time.perf_counter()
            label = labels[frame_index]
            if stage in ("teacher", "both"):
                label = (await models.teacher_queue.label(frame, frame_index)).labels
            taken = None
            if stage in ("distill", "both"):
                result, _ = await models.distillation.train(distillers[number], frame, label, None)
                taken = result.steps
            done = time.perf_counter()
            if window_start is not None and not stop.is_set():
                answer_times[number].append(done)
                if len(answer_times[number]) == 2:
                    short.discard(number)
                    if not short:
                        enough.set()
                if taken is not None:
                    steps.append(taken)
                if start >= window_start:
                    latencies.append(done - start)
            index += sessions

    tasks = [asyncio.create_task(session(n)) for n in range(sessions)]
    await asyncio.sleep(warmup_s)
    sampler = _WindowSampler(device)
    window_start = time.perf_counter()
    await asyncio.sleep(seconds)
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(enough.wait(), (WINDOW_CAP - 1) * seconds)
    stop.set()
    elapsed = time.perf_counter() - window_start
    busy = sampler.stop()
    await asyncio.wait(tasks)
    return _Window(elapsed, answer_times, latencies, steps, busy)


def device_name(device: Any) -> str:
    """The GPU's name, or the CPU's model and core count."""
    import os

    import torch

    from shadowtutor_lab.evaluation.machine import cpu_model

    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"CPU: {cpu_model()} ({os.cpu_count()} cores)"


class _WindowSampler:
    """NVML's busy fraction over one measured window (None where the GPU cannot be monitored)."""

    def __init__(self, device: Any) -> None:
        from shadowtutor.gpu_usage import GpuUsageSampler, gpu_monitoring_available, nvml_index

        self.sampler = None
        if device.type == "cuda" and gpu_monitoring_available():
            self.sampler = GpuUsageSampler(nvml_index(device.index or 0), interval_s=0.05)
            self.sampler.start()

    def stop(self) -> float | None:
        if self.sampler is None:
            return None
        self.sampler.stop()
        return self.sampler.busy_fraction()


def run_server_bench(
    settings: Any, synthetic_teacher: bool, sizes: Sequence[tuple[int, int]], session_counts: Sequence[int],
    stages: Sequence[str], engines: Sequence[str], warmup_s: float, seconds: float, progress: Any = print,
) -> tuple[list[BenchPoint], dict[str, Any]]:
    """Measure every (engine, size, stage, sessions). ``settings``: the server's (``ServerSettings``);
    ``synthetic_teacher``: label with the generated scene's exact labels instead of the teacher the settings
    name. Returns the points and what they ran on (device, torch, teacher, THRESHOLD, MAX_UPDATES)."""
    import torch

    from services.server.teaching.loading import load_models

    if synthetic_teacher:
        scene = SyntheticScene(LVS_CLASSES)
        models = load_models(settings, SyntheticTeacher(scene))
    else:
        models = load_models(settings)
        scene = SyntheticScene(tuple(models.teacher.class_names))
    for size in sizes:
        if size not in scene.frames:
            scene.add_size(size)
    with startup_heap_frozen():  # as the server runs once its models are loaded
        points = [point for engine in engines for point in _measure_engine(
            settings.model_copy(update={"distill_engine": engine}), engine, models, scene, sizes, session_counts,
            stages, warmup_s, seconds, progress)]
    info = {
        "device": device_name(models.device),
        "torch": torch.__version__,
        "teacher": models.teacher.name,
        "threshold": settings.algorithm_params().threshold,
        "max_updates": settings.algorithm_params().max_updates,
    }
    return points, info


def _measure_engine(
    settings: Any, engine: str, models: Any, scene: SyntheticScene, sizes: Sequence[tuple[int, int]],
    session_counts: Sequence[int], stages: Sequence[str], warmup_s: float, seconds: float, progress: Any,
) -> list[BenchPoint]:
    """Every (size, stage, sessions) point of one distillation ``engine`` (``settings`` name it), on a teaching of
    its own around ``models``."""
    from services.server.metrics.server_metrics import ServerMetrics
    from services.server.teaching.local import LocalTeaching

    points: list[BenchPoint] = []

    async def run_engine() -> None:
        teaching = LocalTeaching(settings, ServerMetrics(), loaded=models)
        teaching.start()
        at_work = teaching.models
        try:
            for size in sizes:
                for stage in stages:
                    for count in session_counts:
                        window = await _measure(at_work, scene, size, count, stage, warmup_s, seconds, models.device)
                        point = BenchPoint(
                            size=size, sessions=count, stage=stage, engine=engine, key_frames=window.answered,
                            seconds=window.seconds,
                            key_frames_per_s=window_rate(window.answer_times, window.seconds),
                            p50_ms=_ms(_percentile(window.latencies, 50)),
                            p95_ms=_ms(_percentile(window.latencies, 95)),
                            mean_steps=statistics.fmean(window.steps) if window.steps else None,
                            gpu_busy=window.gpu_busy,
                        )
                        points.append(point)
                        progress(_line(point))
        finally:
            await teaching.stop()

    asyncio.run(run_engine())
    return points


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1000.0


def _line(point: BenchPoint) -> str:
    p50 = "-" if point.p50_ms is None else f"{point.p50_ms:.0f}"
    p95 = "-" if point.p95_ms is None else f"{point.p95_ms:.0f}"
    busy = "" if point.gpu_busy is None else f", GPU busy {point.gpu_busy:.0%}"
    return (f"{point.engine} {point.size[0]}x{point.size[1]} {point.stage:<7} {point.sessions:>4} sessions: "
            f"{point.key_frames_per_s:8.1f} key frames/s, p50 {p50} ms, p95 {p95} ms{busy}")


def server_profile(
    points: Sequence[BenchPoint], info: dict[str, Any], command: str, measured: str
) -> dict[str, Any]:
    """The capacity planner's server profile from the points of one engine: per frame size where all three
    stages were measured, the teacher's and one distillation step's server time per key frame and a whole key
    frame's, each at the session count that answered most. ValueError where no size has all three stages."""
    sizes: dict[str, Any] = {}
    for size in sorted({p.size for p in points}):
        best = {
            stage: max((p for p in points if p.size == size and p.stage == stage), key=_rate, default=None)
            for stage in STAGES
        }
        teacher, distill, both = best["teacher"], best["distill"], best["both"]
        if teacher is None or distill is None or both is None or not all(_rate(p) > 0 for p in best.values()):
            continue
        if not distill.mean_steps or not both.mean_steps:
            continue
        sizes[f"{size[0]}x{size[1]}"] = {
            "teacher_ms": 1000.0 / teacher.key_frames_per_s,
            "step_ms": 1000.0 / distill.key_frames_per_s / distill.mean_steps,
            "key_frame_ms": 1000.0 / both.key_frames_per_s,
            "steps": both.mean_steps,
            "sessions": both.sessions,
        }
    if not sizes:
        raise ValueError("a server profile needs the teacher, distill and both stages measured at some frame size")
    return {"schema": SCHEMA, "device": info["device"], "measured": measured, "command": command,
            "teacher": info["teacher"], "sizes": sizes}


def _rate(point: BenchPoint | None) -> float:
    return point.key_frames_per_s if point is not None else 0.0


def markdown_report(points: Sequence[BenchPoint], info: dict[str, Any], command: str) -> str:
    """The points as a Markdown page that names the device and the command."""
    lines = [
        "# Server throughput (in-process, no network)",
        "",
        f"Device: **{info['device']}**, torch {info['torch']}; teacher `{info['teacher']}`; THRESHOLD "
        f"{info['threshold']}, MAX_UPDATES {info['max_updates']}. Each session keeps one key frame in flight.",
        "",
        f"Command: `{command}`",
        "",
        "| engine | size | stage | sessions | key frames/s | p50 ms | p95 ms | steps/key frame | GPU busy |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for p in points:
        lines.append(
            f"| {p.engine} | {p.size[0]}x{p.size[1]} | {p.stage} | {p.sessions} | {p.key_frames_per_s:.1f} | "
            f"{_cell(p.p50_ms, '.0f')} | {_cell(p.p95_ms, '.0f')} | {_cell(p.mean_steps, '.2f')} | "
            f"{_cell(p.gpu_busy, '.0%')} |"
        )
    return "\n".join(lines) + "\n"


def _cell(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)
