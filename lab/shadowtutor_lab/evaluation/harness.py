"""The in-process evaluation loop: Wild, P-1, P-8 and F-1 on one scene (the ShadowTutor paper, section 6).

All settings start from the same pre-trained student and see the same frames in lock-step;
every setting has its own edge copy of the student (built by the edge's labeller registry); the distilled
ones reach a server copy with its optimiser through a
:class:`~shadowtutor_lab.evaluation.simulated_link.SimulatedLink` (P-1 and P-8 share one
server: they send the same key frames, and the server's training does not depend on the
delay). Each frame's mIoU is measured against the teacher's label of that frame (key and
non-key frames alike, as in Table 6).
"""

from __future__ import annotations

import copy
import dataclasses
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from shadowtutor.acceleration.labellers.edge_student import EdgeStudent, edge_student
from shadowtutor.acceleration.labellers.registry import LabellerSpec
from shadowtutor.algorithms.client_loop import ClientLoop
from shadowtutor.algorithms.distill import Distiller
from shadowtutor.algorithms.metrics import miou
from shadowtutor.algorithms.params import AlgorithmParams
from shadowtutor.classes import background_index
from shadowtutor.models.precision import TrainingPrecision
from shadowtutor.models.scale import Size
from shadowtutor.models.student import DistillMode, StudentNet
from shadowtutor.teachers import Teacher, TeacherAnswer
from shadowtutor_lab.evaluation.simulated_link import KeyFrameRecord, LinkCodecs, SimulatedLink, SimulatedServer

if TYPE_CHECKING:
    from shadowtutor.acceleration.change_based.backend import ChangeBasedOptions


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
SETTING_KEYS = (WILD, *(s.key for s in SETTINGS))


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
        return len(next(iter(self.traces.values())).miou)

    def merge(self, other: SceneEvaluation) -> SceneEvaluation:
        """One evaluation with the settings of both (two runs over the same scene and frames)."""
        if (other.name, other.width, other.height, other.frames) != (self.name, self.width, self.height, self.frames):
            raise ValueError(f"cannot merge evaluations of different runs: {self.name} and {other.name}")
        shared = set(self.traces) & set(other.traces)
        if shared:
            raise ValueError(f"both evaluations hold the settings {sorted(shared)}")
        traces = {**self.traces, **other.traces}
        ordered = {key: traces[key] for key in SETTING_KEYS if key in traces}
        return SceneEvaluation(self.name, self.width, self.height, ordered, self.seconds + other.seconds)

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
    """One distilled setting: its edge (the edge's labeller) and client loop, linked to a server."""

    def __init__(
        self, setting: Setting, server: SimulatedServer, edge: EdgeStudent, params: AlgorithmParams,
        fps: float | None,
    ) -> None:
        self.link = SimulatedLink(server, setting.delay_frames)
        self.loop = ClientLoop(params.replace(mode=setting.mode), edge, self.link, fps=fps)
        self.trace = SettingTrace(records=self.link.records)

    def process(self, frame: np.ndarray, label: np.ndarray, num_classes: int) -> np.ndarray:
        """Label ``frame`` on the edge, record it against the teacher's ``label``, and return the edge's labels."""
        result = self.loop.process(frame)
        self.trace.miou.append(miou(result.labels, label, num_classes))
        self.trace.strides.append(result.stride)
        if result.is_key_frame:
            self.trace.key_frames.append(result.index)
        return result.labels


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
    settings: Sequence[str] = SETTING_KEYS,
    link: LinkCodecs | None = None,
    change_based: ChangeBasedOptions | None = None,
    student_size: Size | None = None,
    on_labels: Callable[[int, dict[str, np.ndarray]], None] | None = None,
    precision: TrainingPrecision = "fp32",
    fps: float | None = None,
) -> SceneEvaluation:
    """Run the ``settings`` (keys of :data:`SETTING_KEYS`) over ``frames`` (BGR uint8, one size).

    Settings of one distillation mode share one server (see
    :class:`~shadowtutor_lab.evaluation.simulated_link.SimulatedServer`); ``link`` puts the
    protocol's codecs on what crosses the simulated link (None: the paper's raw accounting);
    ``change_based`` runs the edges' students change-based; ``student_size`` ``(W, H)`` runs every
    student (edge and server copies) on frames resized to it (:mod:`shadowtutor.models.scale`); ``precision``
    is the servers' training arithmetic (:class:`~shadowtutor.algorithms.distill.Distiller`); ``fps`` the
    scene's frame rate: the clock of the edges' pacing and of a stream codec's key frames (None: unknown, the
    paper's frame strides and a stream at the default rate).
    ``on_frame(index, running mean mIoU per setting)`` is called after each frame (progress);
    ``on_labels(index, labels per setting)`` gets each frame's label maps (the teacher's under ``"teacher"``).
    """
    unknown = [key for key in settings if key not in SETTING_KEYS]
    if unknown or not settings:
        raise ValueError(f"unknown settings {unknown}: choose from {', '.join(SETTING_KEYS)}")
    if tuple(teacher.class_names) != tuple(class_names):
        raise ValueError(
            f"the teacher's classes {list(teacher.class_names)} differ from the student's {list(class_names)}"
        )
    num_classes = len(class_names)
    background = background_index(class_names)
    current: list[tuple[int, TeacherAnswer]] = []  # the frame being processed and its teacher's answer

    def teacher_label(frame_index: int, frame: np.ndarray) -> TeacherAnswer:
        if not current or current[0][0] != frame_index:
            raise RuntimeError(f"key frame {frame_index} submitted out of step with the harness")
        return current[0][1]

    spec = LabellerSpec(backend=backend, change_based=change_based, threads=threads)
    servers: dict[str, SimulatedServer] = {}
    runs: dict[str, _DistilledRun] = {}
    for setting in SETTINGS:
        if setting.key in settings:
            if setting.mode not in servers:
                mode_params = params.replace(mode=setting.mode)
                distiller = Distiller(copy.deepcopy(student), mode_params, background, student_size=student_size,
                                      precision=precision)
                servers[setting.mode] = SimulatedServer(distiller, teacher_label, link, fps=fps)
            edge = edge_student(spec, student, student_size)
            if servers[setting.mode].welcome is not None:
                edge.apply(servers[setting.mode].welcome)
            runs[setting.key] = _DistilledRun(setting, servers[setting.mode], edge, params, fps)
    wild = edge_student(spec, student, student_size) if WILD in settings else None
    traces = {**({WILD: SettingTrace()} if wild else {}), **{key: run.trace for key, run in runs.items()}}
    start = time.perf_counter()
    size: tuple[int, int] | None = None
    for index, frame in enumerate(frames):
        if size is None:
            size = (frame.shape[1], frame.shape[0])
        elif (frame.shape[1], frame.shape[0]) != size:
            raise ValueError(f"frame {index} is {frame.shape[1]}x{frame.shape[0]}, earlier ones {size[0]}x{size[1]}")
        taught = teacher.teach_batch([frame], [index])[0]
        label = taught.labels
        current[:] = [(index, taught)]
        labelled = {"teacher": label}
        if wild is not None:
            labelled[WILD] = wild.infer(frame)
            traces[WILD].miou.append(miou(labelled[WILD], label, num_classes))
        for key, run in runs.items():
            labelled[key] = run.process(frame, label, num_classes)
        if on_labels is not None:
            on_labels(index, labelled)
        if on_frame is not None:
            on_frame(index, {key: float(np.mean(t.miou)) for key, t in traces.items()})
    if size is None:
        raise ValueError(f"scene {name!r} has no frames")
    return SceneEvaluation(name, size[0], size[1], traces, time.perf_counter() - start)
