"""The flow path (regions segmented by the student or warped by optical flow) as a decorator of the
plain student."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import torch

from shadowtutor.acceleration.labellers.base import FrameLabeller, LabellerStats, OneFrameAtATime
from shadowtutor.acceleration.regions.labeller import FlowPathConfig, RegionLabeller
from shadowtutor.models.inference import check_frame


class FlowPathLabeller(OneFrameAtATime):
    """Frames region by region (:class:`RegionLabeller`), the segmentation path on ``inner``.

    Any weight change (load or apply) makes every region key stale: the next frame is segmented, so
    no label made by an older student is warped further.
    """

    def __init__(self, inner: FrameLabeller, config: FlowPathConfig) -> None:
        self.inner = inner
        self.config = config
        self.regions: RegionLabeller = config.build(inner.label)

    @property
    def kind(self) -> str:
        return f"{self.inner.kind}+flow-path"

    def load(self, state: Mapping[str, torch.Tensor], class_names: tuple[str, ...]) -> None:
        self.inner.load(state, class_names)
        self.regions.invalidate_keys()

    def apply(self, update: Mapping[str, torch.Tensor]) -> None:
        self.inner.apply(update)
        self.regions.invalidate_keys()

    def label(self, frame: np.ndarray) -> np.ndarray:
        return self.regions.label(check_frame(frame))

    def new_scene(self) -> None:
        self.regions.invalidate_keys()
        self.inner.new_scene()

    def stats(self) -> LabellerStats:
        return LabellerStats(kind=self.kind, regions=self.regions.last)
