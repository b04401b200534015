"""The interface every edge labeller offers: a frame in, labels out; weights in; what the last frame
did."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, TypeVar

import numpy as np

if TYPE_CHECKING:
    import torch

    from shadowtutor.acceleration.change_based.runner import ChangeStats
    from shadowtutor.acceleration.regions.labeller import FrameRegions
    from shadowtutor.models.student import StudentNet


@dataclass(kw_only=True, frozen=True)
class Trial:
    """How an acceleration compared with the plain student over its trial frames (median seconds a
    frame)."""

    # the acceleration's kind
    candidate: str
    # the plain student's backend
    plain: str
    # frames the acceleration was timed on
    frames: int
    candidate_seconds: float
    plain_seconds: float
    # True: the plain student labels every frame after the trial
    stepped_aside: bool

    @property
    def speedup(self) -> float:
        """The acceleration's speed as a multiple of the plain student's (below 1: slower)."""
        return (
            self.plain_seconds / self.candidate_seconds
            if self.candidate_seconds > 0
            else float("inf")
        )

    def to_dict(self) -> dict[str, object]:
        return {
            "candidate": self.candidate,
            "plain": self.plain,
            "frames": self.frames,
            "candidate_seconds": self.candidate_seconds,
            "plain_seconds": self.plain_seconds,
            "speedup": self.speedup,
            "stepped_aside": self.stepped_aside,
        }


@dataclass(kw_only=True, frozen=True)
class LabellerStats:
    """What the last frame did; a part is None when the labeller in use has no such part."""

    # the labeller in use, e.g. ``onnx``, ``torch+change-based``, ``torch+flow-path``, ``cluster``
    kind: str
    # change-based inference: the frame's mode and changed fractions
    change: ChangeStats | None = None
    # flow path or cluster: each region's path and key age
    regions: FrameRegions | None = None
    # cluster: live workers, regions left waiting for one
    cluster: tuple[int, int] | None = None
    # the measured comparison with the plain student, once it is made
    trial: Trial | None = None


class FrameLabeller(Protocol):
    """Labels BGR ``uint8 (H, W, 3)`` frames as ``uint8 (H, W)`` class maps with the weights it was
    given.

    Contract: :meth:`label` raises RuntimeError before the first :meth:`load`; :meth:`load` installs
    full weights (a checkpoint error if incomplete), :meth:`apply` overwrites the tensors it names
    (an error for unknown names or shapes); after either, no label made by the older weights is
    reused (warped, cached). Frames given to :meth:`label` in the order :meth:`pipeline` yielded
    them may have been started early.
    """

    @property
    def kind(self) -> str: ...

    def load(self, state: Mapping[str, torch.Tensor], class_names: tuple[str, ...]) -> None: ...

    def apply(self, update: Mapping[str, torch.Tensor]) -> None: ...

    def label(self, frame: np.ndarray) -> np.ndarray: ...

    def pipeline(self, frames: Iterable[np.ndarray]) -> Iterator[np.ndarray]:
        """The same frames, in order; a labeller that works on several at once starts them as they
        are drawn."""
        ...

    def release(self) -> list[np.ndarray]:
        """The frames :meth:`pipeline` drew but has not yielded yet, handed back (their work
        dropped)."""
        ...

    def new_scene(self) -> None:
        """The next frame starts another video: nothing of the frames before is reused."""
        ...

    def stats(self) -> LabellerStats: ...

    def close(self) -> None: ...


def label_stream(labeller: FrameLabeller, frames: Iterable[np.ndarray]) -> Iterator[np.ndarray]:
    """The labels of ``frames``, in order, as the agent makes them (pipelined where the labeller
    can)."""
    for frame in labeller.pipeline(frames):
        yield labeller.label(frame)


class OneFrameAtATime:
    """The parts of :class:`FrameLabeller` for a labeller that works on one frame at a time and
    keeps no scene."""

    def pipeline(self, frames: Iterable[np.ndarray]) -> Iterator[np.ndarray]:
        return iter(frames)

    def release(self) -> list[np.ndarray]:
        return []

    def new_scene(self) -> None:
        return None

    def close(self) -> None:
        return None


Labeller = TypeVar("Labeller", bound="FrameLabeller")


def holding(labeller: Labeller, student: StudentNet) -> Labeller:
    """``labeller`` loaded with ``student``'s weights (class names by number: labels are class
    indices)."""
    labeller.load(student.state_dict(), tuple(str(index) for index in range(student.num_classes)))
    return labeller
