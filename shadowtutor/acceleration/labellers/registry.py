"""The one place that turns an edge's settings into its labeller, and that says which accelerations
combine.

An acceleration is declared once in :data:`ACCELERATIONS`: the setting that turns it on, the
settings it cannot run with, the student backends it runs on, and how it is built around (or instead
of) the plain student. :func:`check` is what the settings validate with; :func:`build_labeller` is
what the agent and the benchmarks build with. Importing this module imports neither torch nor OpenCV
(the settings use it).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from shadowtutor.models.backends import CHANGE_BASED_FALLBACKS

if TYPE_CHECKING:
    from shadowtutor.acceleration.change_based.backend import ChangeBasedOptions
    from shadowtutor.acceleration.labellers.base import FrameLabeller
    from shadowtutor.acceleration.regions.labeller import FlowPathConfig

# Frames an acceleration is timed on against the plain student before it may step aside.
DEFAULT_TRIAL_FRAMES = 60


class LabellerConfigError(ValueError):
    """Settings that name accelerations (or a backend) that cannot run together; the message names
    them."""


@dataclass(kw_only=True, frozen=True)
class LabellerSpec:
    """What the edge's labeller is: the student's backend and the accelerations that are on.

    ``flow_path`` is the flow path's configuration, which the cluster's workers follow too (one of
    them is needed with ``cluster``); ``trial_frames`` 0 keeps an acceleration whatever it costs.
    """

    backend: str = "auto"
    change_based: ChangeBasedOptions | None = None
    flow_path: FlowPathConfig | None = None
    cluster: str | None = None
    # the flow path labels on this device (else its config only serves the cluster)
    flow_path_on: bool = False
    trial_frames: int = 0
    threads: int | None = None

    def on(self) -> set[str]:
        """The names of the accelerations these settings turn on."""
        return {a.name for a in ACCELERATIONS if a.enabled(self)}


@dataclass(kw_only=True, frozen=True)
class Acceleration:
    """One way to label faster than the plain student, as the registry knows it."""

    # the edge setting that turns it on
    name: str
    # in words, for error messages
    meant_for: str
    # whether a spec turns it on
    enabled: Callable[[LabellerSpec], bool]
    # around the labeller built so far
    build: Callable[[FrameLabeller | None, LabellerSpec], FrameLabeller]
    # settings it cannot run with
    excludes: frozenset[str] = field(default_factory=frozenset)
    # the backends it runs on (besides auto); None: any
    backends: tuple[str, ...] | None = None
    # builds its own students (``build`` gets None)
    replaces_student: bool = False


def _change_based(inner: FrameLabeller | None, spec: LabellerSpec) -> FrameLabeller:
    from shadowtutor.acceleration.labellers.change_based import ChangeBasedLabeller
    from shadowtutor.acceleration.labellers.student import StudentLabeller

    assert isinstance(inner, StudentLabeller) and spec.change_based is not None
    return ChangeBasedLabeller(inner, spec.change_based)


def _flow_path(inner: FrameLabeller | None, spec: LabellerSpec) -> FrameLabeller:
    from shadowtutor.acceleration.labellers.flow_path import FlowPathLabeller

    assert inner is not None and spec.flow_path is not None
    return FlowPathLabeller(inner, spec.flow_path)


def _cluster(inner: FrameLabeller | None, spec: LabellerSpec) -> FrameLabeller:
    from shadowtutor.acceleration.labellers.cluster import ClusterLabeller
    from shadowtutor.acceleration.regions.labeller import FlowPathConfig

    assert spec.cluster is not None
    return ClusterLabeller(spec.cluster, spec.flow_path or FlowPathConfig())


# In building order. The cluster's workers run the flow path themselves: with cluster on, flow_path
# only configures them.
ACCELERATIONS = (
    Acceleration(
        name="change_based",
        meant_for="static cameras",
        enabled=lambda spec: spec.change_based is not None,
        build=_change_based,
        excludes=frozenset({"flow_path", "cluster"}),
        backends=CHANGE_BASED_FALLBACKS,
    ),
    Acceleration(
        name="flow_path",
        meant_for="moving cameras",
        enabled=lambda spec: spec.flow_path_on and spec.cluster is None,
        build=_flow_path,
        excludes=frozenset({"change_based", "student_size"}),
    ),
    Acceleration(
        name="cluster",
        meant_for="moving cameras, regions on other devices",
        enabled=lambda spec: spec.cluster is not None,
        build=_cluster,
        excludes=frozenset({"change_based", "student_size"}),
        replaces_student=True,
    ),
)
BY_NAME = {a.name: a for a in ACCELERATIONS}


def check(on: set[str], backend: str = "auto", student_size: bool = False) -> None:
    """A :class:`LabellerConfigError` when the settings ``on`` (accelerations, and ``student_size``
    when set) exclude each other, or an acceleration does not run on ``backend``."""
    given = set(on) | ({"student_size"} if student_size else set())
    for name in sorted(given & BY_NAME.keys()):
        acceleration = BY_NAME[name]
        clash = sorted(acceleration.excludes & given)
        if clash:
            raise LabellerConfigError(
                f"{name} ({acceleration.meant_for}) and {clash[0]} exclude each other: "
                "turn one of them off"
            )
        if acceleration.backends is not None and backend not in ("auto", *acceleration.backends):
            raise LabellerConfigError(
                f"{name} runs with the {' or '.join(acceleration.backends)} backend (or auto), not "
                f"{backend}"
            )


def build_labeller(spec: LabellerSpec) -> FrameLabeller:
    """The labeller ``spec`` describes: the plain student, the accelerations that are on around (or
    instead of) it, and, with ``trial_frames``, the trial that replaces them by the plain student on
    the default backend when they are measured slower. An error for a combination :func:`check`
    refuses."""
    from shadowtutor.acceleration.labellers.student import StudentLabeller

    on = [a for a in ACCELERATIONS if a.enabled(spec)]
    check({a.name for a in on}, spec.backend)
    labeller: FrameLabeller | None = None
    if not any(a.replaces_student for a in on):
        labeller = StudentLabeller(
            spec.backend, change_based=spec.change_based is not None, threads=spec.threads
        )
    for acceleration in on:
        labeller = acceleration.build(labeller, spec)
    assert labeller is not None
    if on and spec.trial_frames:
        from shadowtutor.acceleration.labellers.step_aside import StepAside

        labeller = StepAside(
            labeller, StudentLabeller("auto", threads=spec.threads), spec.trial_frames
        )
    return labeller
