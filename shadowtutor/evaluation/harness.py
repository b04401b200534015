"""The in-process evaluation loop: Wild, P-1, P-8 and F-1 on one scene (seed 001, section 6).

All four settings start from the same pre-trained student and see the same frames in
lock-step; every setting has its own edge copy of the student (an inference backend) and,
for the distilled ones, its own server copy with its optimiser behind a
:class:`~shadowtutor.evaluation.simulated_link.SimulatedLink`. Each frame's mIoU is measured
against the teacher's label of that frame (key and non-key frames alike, as in Table 6).
"""

from __future__ import annotations

import copy
import dataclasses
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from shadowtutor.algorithms.client_loop import ClientLoop
from shadowtutor.algorithms.distill import Distiller
from shadowtutor.algorithms.metrics import miou
from shadowtutor.algorithms.params import AlgorithmParams
from shadowtutor.classes import background_index
from shadowtutor.evaluation.simulated_link import KeyFrameRecord, SimulatedLink
from shadowtutor.models.inference import build_inference_backend
from shadowtutor.models.student import DistillMode, StudentNet
from shadowtutor.teachers import Teacher


@dataclass(frozen=True)
class Setting:
    key: str
    title: str
    mode: DistillMode
    delay_frames: int


# The paper's settings (Table 6): partial or full distillation, the update landing 1 or 8
# frames after its key frame.
SETTINGS = (
    Setting("p1", "P-1", "partial", 1),
    Setting("p8", "P-8", "partial", 8),
    Setting("f1", "F-1", "full", 1),
)
WILD = "wild"


@dataclass
class SettingTrace:
    """Per-frame record of one setting."""

    miou: list[float] = field(default_factory=list)
    strides: list[int] = field(default_factory=list)  # stride in force after each frame
    key_frames: list[int] = field(default_factory=list)
    records: list[KeyFrameRecord] = field(default_factory=list)


@dataclass
class SceneEvaluation:
    """Everything measured on one scene; :meth:`to_dict` / :meth:`from_dict` round-trip it as JSON."""

    name: str
    width: int
    height: int
    traces: dict[str, SettingTrace]  # WILD and each setting's key
    seconds: float = 0.0

    @property
    def frames(self) -> int:
        return len(self.traces[WILD].miou)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SceneEvaluation:
        traces = {
            key: SettingTrace(
                miou=list(t["miou"]),
                strides=list(t["strides"]),
                key_frames=list(t["key_frames"]),
                records=[
                    KeyFrameRecord(**{**r, "step_seconds": tuple(r["step_seconds"])}) for r in t["records"]
                ],
            )
            for key, t in data["traces"].items()
        }
        return cls(data["name"], int(data["width"]), int(data["height"]), traces, float(data["seconds"]))


class _DistilledRun:
    """One distilled setting: edge backend + client loop + simulated link to a server copy."""

    def __init__(
        self,
        setting: Setting,
        student: StudentNet,
        params: AlgorithmParams,
        background: int,
        backend: str,
        threads: int | None,
    ) -> None:
        params = dataclasses.replace(params, mode=setting.mode)
        self._current: tuple[int, np.ndarray] | None = None
        distiller = Distiller(copy.deepcopy(student), params, background)
        self.link = SimulatedLink(distiller, self._teacher_label, setting.delay_frames)
        self.loop = ClientLoop(params, build_inference_backend(backend, student, threads), self.link)
        self.trace = SettingTrace(records=self.link.records)

    def _teacher_label(self, frame_index: int, frame: np.ndarray) -> np.ndarray:
        if self._current is None or self._current[0] != frame_index:
            raise RuntimeError(f"key frame {frame_index} submitted out of step with the harness")
        return self._current[1]

    def process(self, index: int, frame: np.ndarray, label: np.ndarray, num_classes: int) -> None:
        self._current = (index, label)
        result = self.loop.process(frame)
        self.trace.miou.append(miou(result.labels, label, num_classes))
        self.trace.strides.append(result.stride)
        if result.is_key_frame:
            self.trace.key_frames.append(result.index)


def evaluate_scene(
    name: str,
    frames: Iterable[np.ndarray],
    teacher: Teacher,
    student: StudentNet,
    class_names: tuple[str, ...],
    params: AlgorithmParams,
    backend: str = "torch",
    threads: int | None = None,
    on_frame: Callable[[int, dict[str, float]], None] | None = None,
) -> SceneEvaluation:
    """Run Wild and every setting of :data:`SETTINGS` over ``frames`` (BGR uint8, one size).

    ``on_frame(index, running mean mIoU per setting)`` is called after each frame (progress).
    """
    if tuple(teacher.class_names) != tuple(class_names):
        raise ValueError(
            f"the teacher's classes {list(teacher.class_names)} differ from the student's {list(class_names)}"
        )
    num_classes = len(class_names)
    background = background_index(class_names)
    wild = build_inference_backend(backend, student, threads)
    runs = {s.key: _DistilledRun(s, student, params, background, backend, threads) for s in SETTINGS}
    traces = {WILD: SettingTrace(), **{key: run.trace for key, run in runs.items()}}
    start = time.perf_counter()
    size: tuple[int, int] | None = None
    for index, frame in enumerate(frames):
        if size is None:
            size = (frame.shape[1], frame.shape[0])
        elif (frame.shape[1], frame.shape[0]) != size:
            raise ValueError(f"frame {index} is {frame.shape[1]}x{frame.shape[0]}, earlier ones {size[0]}x{size[1]}")
        label = teacher.label(frame, index)
        traces[WILD].miou.append(miou(wild.infer(frame), label, num_classes))
        for run in runs.values():
            run.process(index, frame, label, num_classes)
        if on_frame is not None:
            on_frame(index, {key: float(np.mean(t.miou)) for key, t in traces.items()})
    if size is None:
        raise ValueError(f"scene {name!r} has no frames")
    return SceneEvaluation(name, size[0], size[1], traces, time.perf_counter() - start)
