"""The student on the edge: one :class:`~shadowtutor.acceleration.labellers.base.FrameLabeller`,
built by the labeller registry from the edge's settings, plus the student size the server asks for;
nothing about versions.

Backends (``--backend``, :mod:`shadowtutor.models.backends`) and accelerations (``--change-based``,
``--flow-path``, ``--cluster``) are the registry's
(:mod:`shadowtutor.acceleration.labellers.registry`): which combine, how each is built, and the
trial after which an acceleration measured slower than the plain student steps aside. Every weight
change (WELCOME, resync, update) goes to the labeller, which reuses no label made by an older
student. Key frames and Algorithm 2 are untouched by any of them.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping

import numpy as np
import torch

from shadowtutor.acceleration.change_based.backend import ChangeBasedOptions
from shadowtutor.acceleration.change_based.runner import ChangeStats
from shadowtutor.acceleration.labellers.base import FrameLabeller, LabellerStats
from shadowtutor.acceleration.labellers.registry import BY_NAME, LabellerSpec, build_labeller
from shadowtutor.acceleration.regions.labeller import FlowPathConfig, FrameRegions
from shadowtutor.models.inference import check_frame
from shadowtutor.models.scale import infer_scaled


class StudentRuntime:
    """The edge's labeller; empty until :meth:`load` gets full weights (the server's WELCOME).

    ``flow_path`` turns the flow path on (with ``cluster``: the workers' configuration);
    ``trial_frames`` 0 keeps an acceleration whatever it costs; ``spec`` (the settings'
    :meth:`labeller_spec`) replaces them all.
    """

    def __init__(
        self,
        backend: str = "auto",
        *,
        change_based: ChangeBasedOptions | None = None,
        flow_path: FlowPathConfig | None = None,
        cluster: str | None = None,
        trial_frames: int = 0,
        spec: LabellerSpec | None = None,
    ) -> None:
        self.spec = spec or LabellerSpec(
            backend=backend,
            change_based=change_based,
            flow_path=flow_path,
            cluster=cluster,
            flow_path_on=flow_path is not None,
            trial_frames=trial_frames,
        )
        # a named backend this machine lacks fails here
        self.labeller: FrameLabeller = build_labeller(self.spec)
        self.loaded = False
        # the session's (WELCOME); None: the frame's size
        self.student_size: tuple[int, int] | None = None

    @property
    def backend_kind(self) -> str:
        """The labeller in use (before the first load: the backend that will be tried first)."""
        return self.labeller.kind

    def load(self, state: Mapping[str, torch.Tensor], class_names: tuple[str, ...]) -> None:
        """Replace the model by one built from a complete state dict (a checkpoint error if it is
        not)."""
        self.labeller.load(state, class_names)
        self.loaded = True

    def update(self, tensors: Mapping[str, torch.Tensor]) -> None:
        """Overwrite some of the model's tensors (a partial update); unknown names or shapes are an
        error."""
        self.labeller.apply(tensors)

    def set_student_size(self, size: tuple[int, int] | None) -> None:
        """Run the student at ``size`` from the next frame on (:mod:`shadowtutor.models.scale`); an
        error when an acceleration that is on excludes a student size."""
        refusing = sorted(
            name for name in self.spec.on() if "student_size" in BY_NAME[name].excludes
        )
        if size is not None and refusing:
            names = " and ".join(name.replace("_", " ") for name in refusing)
            raise ValueError(
                f"the server distils at student size {size[0]}x{size[1]}, which the {names} "
                "(regions of a frame) cannot run at"
            )
        self.student_size = size

    def infer(self, frame: np.ndarray) -> np.ndarray:
        """Per-pixel class labels ``(H, W)`` for one BGR uint8 frame."""
        if self.student_size is None:
            return self.labeller.label(frame)
        return infer_scaled(self.labeller.label, check_frame(frame), self.student_size)

    def pipeline(self, frames: Iterable[np.ndarray]) -> Iterator[np.ndarray]:
        """The frames to label, in order, started early where the labeller works on several at
        once."""
        return self.labeller.pipeline(frames)

    def close(self) -> None:
        self.labeller.close()

    def stats(self) -> LabellerStats:
        return self.labeller.stats()

    @property
    def change_stats(self) -> ChangeStats | None:
        """What the last frame did, when the student runs change-based."""
        return self.stats().change

    @property
    def cluster_state(self) -> tuple[int, int] | None:
        """Live workers and the regions waiting for one after the last frame (None without a
        cluster)."""
        return self.stats().cluster

    @property
    def last_regions(self) -> FrameRegions | None:
        """The paths the last frame's regions took (None without the flow path or a cluster)."""
        return self.stats().regions
