"""The harness's unit of work, a *pass* (some settings over one scene), run here or in workers.

A scene is evaluated in two passes of about equal cost: P-1 with P-8 (they share one
server, so P-8's distillation comes free) and F-1 with Wild. Passes are independent, so
``workers > 1`` runs them in that many processes (``spawn``: OpenMP is not fork-safe), each
with ``threads`` torch / ONNX Runtime threads; one tqdm bar counts the frames of all passes.
"""

from __future__ import annotations

import itertools
import multiprocessing
import queue
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from shadowtutor.algorithms.params import AlgorithmParams
from shadowtutor.models.precision import TrainingPrecision
from shadowtutor_lab.evaluation.harness import SETTING_KEYS, SceneEvaluation, evaluate_scene
from shadowtutor_lab.evaluation.simulated_link import LinkCodecs

if TYPE_CHECKING:
    from shadowtutor.acceleration.change_based.backend import ChangeBasedOptions

# Settings evaluated together in one pass over a scene.
PASSES = (("p1", "p8"), ("wild", "f1"))
_PROGRESS_EVERY = 10  # frames between progress messages from a worker

Size = tuple[int, int]


@dataclass(frozen=True)
class ScenePass:
    name: str
    scene_dir: Path
    settings: tuple[str, ...]
    frames: int
    size: Size | None
    student: Path
    teacher: str = "labels"
    teacher_options: dict[str, Any] = field(default_factory=dict)
    params: AlgorithmParams = AlgorithmParams()
    backend: str = "torch"
    threads: int | None = None
    link: LinkCodecs | None = None  # codecs on the simulated link (None: the paper's raw accounting)
    student_size: Size | None = None  # the student's input scale (None: the frame's size)
    change_based: ChangeBasedOptions | None = None  # the edges' students change-based (None: full frames)
    precision: TrainingPrecision = "fp32"  # the servers' training arithmetic

    def __post_init__(self) -> None:
        unknown = set(self.settings) - set(SETTING_KEYS)
        if unknown:
            raise ValueError(f"unknown settings {sorted(unknown)}")


def run_pass(job: ScenePass, on_frames: Callable[[int], None] | None = None,
             on_labels: Callable[[int, dict[str, Any]], None] | None = None) -> SceneEvaluation:
    """Evaluate ``job.settings`` on the first ``job.frames`` frames of the scene; ``on_frames(n)`` counts
    frames done, ``on_labels`` gets each frame's label maps
    (:func:`~shadowtutor_lab.evaluation.harness.evaluate_scene`)."""
    from shadowtutor.models.checkpoint import load_student
    from shadowtutor.scene_store import Scene
    from shadowtutor.teachers import build_teacher

    scene = Scene.open(job.scene_dir)
    loaded = load_student(job.student)
    if job.teacher == "labels":
        teacher = build_teacher("labels", labels_dir=job.scene_dir)
    else:
        teacher = build_teacher(job.teacher, **job.teacher_options)

    reported = [0]  # frames reported to on_frames so far

    def on_frame(index: int, running: dict[str, float]) -> None:
        done = index + 1
        if on_frames is not None and (done - reported[0] >= _PROGRESS_EVERY or done == job.frames):
            on_frames(done - reported[0])
            reported[0] = done

    return evaluate_scene(
        job.name, itertools.islice(scene.frames(job.size), job.frames), teacher, loaded.model,
        loaded.class_names, job.params, job.backend, job.threads, on_frame, job.settings, job.link,
        student_size=job.student_size, change_based=job.change_based, on_labels=on_labels, precision=job.precision,
        fps=scene.meta.fps,
    )


_worker_progress: Any = None


def _init_worker(progress: Any, threads: int) -> None:
    import torch

    global _worker_progress
    _worker_progress = progress
    torch.set_num_threads(threads)


def _run_in_worker(job: ScenePass) -> dict[str, Any]:
    return run_pass(job, _worker_progress.put).to_dict()


def run_passes(
    jobs: Sequence[ScenePass], workers: int = 1, threads: int = 1, progress: bool = True
) -> Iterator[tuple[ScenePass, SceneEvaluation]]:
    """Run ``jobs`` and yield each with its evaluation as it finishes."""
    from shadowtutor.progress import progress_bar

    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    bar = progress_bar(total=sum(j.frames for j in jobs), unit="frame", desc="bench accuracy", disable=not progress,
               dynamic_ncols=True)
    try:
        if workers == 1:
            for job in jobs:
                bar.set_postfix_str(f"{job.name} {'+'.join(job.settings)}", refresh=False)
                yield job, run_pass(job, bar.update)
            return
        context = multiprocessing.get_context("spawn")
        messages = context.Queue()
        with ProcessPoolExecutor(workers, mp_context=context, initializer=_init_worker,
                                 initargs=(messages, threads)) as pool:
            futures: dict[Future[dict[str, Any]], ScenePass] = {pool.submit(_run_in_worker, j): j for j in jobs}
            pending = set(futures)
            try:
                while pending:
                    done, pending = wait(pending, timeout=0.5, return_when=FIRST_COMPLETED)
                    _drain(messages, bar)
                    for future in done:
                        yield futures[future], SceneEvaluation.from_dict(future.result())
            except BaseException:
                for future in pending:
                    future.cancel()
                raise
            _drain(messages, bar)
    finally:
        bar.close()


def _drain(messages: Any, bar: Any) -> None:
    while True:
        try:
            bar.update(messages.get_nowait())
        except queue.Empty:
            return
