"""Change-based execution of the student (CBinfer, section 3) for static cameras.

:class:`ChangeBasedStudent` labels a frame by recomputing, layer by layer, only what the
change since the previous frames reaches (see :mod:`.stages`). Three things make it run in
full instead, through the same caches:

* the first frame, a new frame size, and every ``refresh_interval`` frames (bounds drift);
* a weight update: the first stage whose weights changed and every stage after it run in full
  once; the stages before keep their caches (with partial distillation: the whole front);
* when more than ``fallback_fraction`` of the frame's pixels changed (camera moved, scene cut,
  lighting jump), the frame goes to ``full_frame`` (the plain backend), and the caches are
  rebuilt by a full evaluation on the first frame that changes less;
* the measured cut-over: both paths are timed as they run (smoothed), and when change-based
  frames cost more than a ``full_frame`` one, the next ``backoff_frames`` frames go to
  ``full_frame``; then change-based execution is tried again, and each time in a row that it still
  does not pay the wait doubles (up to ``MAX_BACKOFF_DOUBLINGS`` times), so a camera where it never
  pays seldom spends a frame finding that out again. While frames run change-based,
  ``full_frame`` is timed again on one of them every ``probe_interval`` (its labels unused), so the
  yardstick follows the machine's load instead of keeping a first, cold measurement.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from shadowtutor.acceleration.change_based.sparse_ops import Change, SparseConv
from shadowtutor.acceleration.change_based.stages import (
    BlockStage,
    ConvStage,
    InputStage,
    TailStage,
    UnfusedTailStage,
    UpsampleStage,
)
from shadowtutor.acceleration.change_based.thresholds import validate_thresholds
from shadowtutor.models.fast_student import (
    TAIL_UPSCALE,
    check_update,
    fold_head,
    fold_tail,
    frame_tail_fusable,
)
from shadowtutor.models.inference import check_frame
from shadowtutor.models.student import StudentNet, block_input_sizes, conv_bias, map_sizes

# Stages in execution order; a weight key belongs to the stage of its top-level module.
STAGES = (
    "in_conv1",
    "in_conv2",
    "enc1",
    "enc2",
    "enc3",
    "dec1",
    "dec1.up",
    "dec2",
    "dec2.up",
    "dec3",
    "tail",
)
_STAGE_OF_MODULE = {"out_conv1": "tail", "out_conv2": "tail", "out_conv3": "tail"}
# The fused tail works on whole blocks of 8x8 output pixels (stages.TailStage); other frame sizes
# run the tail unfused (stages.UnfusedTailStage).
FUSED_TAIL_MULTIPLE = 2 * TAIL_UPSCALE


def fused_tail_fits(height: int, width: int) -> bool:
    """Whether the fused tail runs frames of this size: sides multiples of
    :data:`FUSED_TAIL_MULTIPLE` (then its blocks tile the frame exactly) and where the tail can be
    fused."""
    return (
        height % FUSED_TAIL_MULTIPLE == 0
        and width % FUSED_TAIL_MULTIPLE == 0
        and frame_tail_fusable(height, width)
    )


# A frame with more changed input pixels than this fraction goes to ``full_frame`` (a moving camera,
# a cut); below it, the backoff guard decides from the measured cost of both paths.
DEFAULT_FALLBACK_FRACTION = 0.25
# A layer with more than this fraction of its outputs to recompute runs its dense convolution.
DEFAULT_DENSE_FRACTION = 0.5
DEFAULT_REFRESH_INTERVAL = 300
DEFAULT_BACKOFF_FRAMES = 60
DEFAULT_PROBE_INTERVAL = 50
# the longest wait: 32 x backoff_frames (1920 frames, about a minute at 30 FPS)
MAX_BACKOFF_DOUBLINGS = 5
SMOOTHING = 0.3

# "change" (change-based), "full" (full evaluation through the caches), "fallback"
FrameMode = str


@dataclass
class ChangeStats:
    """What the last frame did: its mode and, per threshold point, the fraction of positions that
    changed."""

    mode: FrameMode = "full"
    input_fraction: float = 1.0
    changed: dict[str, float] = field(default_factory=dict)


class ChangeBasedStudent:
    """Labels ``uint8 (H, W)`` for BGR ``uint8 (H, W, 3)`` frames of a static camera,
    change-based."""

    def __init__(
        self,
        student: StudentNet,
        thresholds: Mapping[str, float],
        full_frame: Callable[[np.ndarray], np.ndarray] | None = None,
        *,
        fallback_fraction: float = DEFAULT_FALLBACK_FRACTION,
        dense_fraction: float = DEFAULT_DENSE_FRACTION,
        refresh_interval: int = DEFAULT_REFRESH_INTERVAL,
        backoff_frames: int = DEFAULT_BACKOFF_FRAMES,
        probe_interval: int = DEFAULT_PROBE_INTERVAL,
    ) -> None:
        if not 0 <= fallback_fraction <= 1 or not 0 <= dense_fraction <= 1:
            raise ValueError("fallback_fraction and dense_fraction must lie in [0, 1]")
        if refresh_interval < 1:
            raise ValueError(f"refresh_interval must be >= 1, got {refresh_interval}")
        self.student = copy.deepcopy(student).cpu().eval()
        self.thresholds = validate_thresholds(thresholds)
        self.full_frame = full_frame
        self.fallback_fraction = fallback_fraction if full_frame is not None else 1.0
        self.dense_fraction = dense_fraction
        self.refresh_interval = refresh_interval
        self.size: tuple[int, int] | None = None
        # index into STAGES of the first stage that must run in full; len(STAGES) = none
        self.full_from = 0
        self.since_refresh = 0
        self.stats = ChangeStats()
        self.backoff_frames = backoff_frames
        # frames left that go to the fallback because change-based frames were slower
        self.backoff = 0
        # back-offs since change-based frames last paid
        self.backoffs_in_a_row = 0
        self.probe_interval = probe_interval
        # change-based frames since full_frame was last timed
        self.since_probe = 0
        # smoothed time of a fallback frame
        self.fallback_seconds: float | None = None
        # smoothed time of a change-based frame
        self.change_seconds: float | None = None

    # -- weights -------------------------------------------------------------------------------

    def load_weights(self, update: Mapping[str, torch.Tensor]) -> None:
        """Install a (partial) ``state_dict``; the stages from the first one it touches recompute
        once."""
        check_update(self.student, update)
        self.student.load_state_dict(dict(update), strict=False)
        touched = {_STAGE_OF_MODULE.get(key.split(".")[0], key.split(".")[0]) for key in update}
        if touched:
            self.full_from = min(self.full_from, min(STAGES.index(name) for name in touched))
            if self.size is not None:
                self._build(self.size, keep_caches=True)

    # -- frames --------------------------------------------------------------------------------

    def infer(self, frame_bgr: np.ndarray) -> np.ndarray:
        frame_bgr = check_frame(frame_bgr)
        frame = torch.from_numpy(frame_bgr)
        size = (frame.shape[0], frame.shape[1])
        with torch.inference_mode():
            if size != self.size:
                self._build(size, keep_caches=False)
                if self.full_frame is not None:
                    # warms the fallback up: its first call is no yardstick
                    self.full_frame(frame_bgr)
                    self.fallback_seconds, self.since_probe = None, 0
                return self._run(frame, None, 0, 1.0)
            moved = self.input.moved(frame_bgr, self.thresholds["in_conv1"])
            fraction = moved.numel() / (size[0] * size[1])
            if fraction > self.fallback_fraction or self.backoff > 0:
                self.backoff = max(0, self.backoff - 1)
                return self._fallback(frame_bgr, frame, fraction)
            if self.full_from == 0 or self.since_refresh >= self.refresh_interval:
                return self._run(frame, None, 0, fraction)
            start = time.perf_counter()
            labels = self._run(frame, moved, self.full_from, fraction)
            self._guard(frame_bgr, time.perf_counter() - start)
            return labels

    def _fallback(self, frame_bgr: np.ndarray, frame: torch.Tensor, fraction: float) -> np.ndarray:
        self.input.accept(frame)
        self.full_from = 0
        self.stats = ChangeStats("fallback", fraction)
        return self._timed_fallback(frame_bgr)

    def _timed_fallback(self, frame_bgr: np.ndarray) -> np.ndarray:
        assert self.full_frame is not None, "frames go to the fallback only where there is one"
        start = time.perf_counter()
        labels = self.full_frame(frame_bgr)
        self.fallback_seconds = _smoothed(self.fallback_seconds, time.perf_counter() - start)
        return labels

    def _guard(self, frame_bgr: np.ndarray, seconds: float) -> None:
        """Measured cut-over: when change-based frames cost more than the fallback, back off to it
        for a while."""
        if self.full_frame is None:
            return
        self.change_seconds = _smoothed(self.change_seconds, seconds)
        if self.fallback_seconds is None or self.since_probe >= self.probe_interval:
            self._timed_fallback(frame_bgr)
            self.since_probe = 0
        self.since_probe += 1
        assert self.fallback_seconds is not None, "timed just above when unknown"
        if self.change_seconds > self.fallback_seconds:
            self.backoff = self.backoff_frames * 2 ** min(
                self.backoffs_in_a_row, MAX_BACKOFF_DOUBLINGS
            )
            self.backoffs_in_a_row += 1
            self.change_seconds = None
        else:
            self.backoffs_in_a_row = 0

    def _run(
        self, frame: torch.Tensor, moved: torch.Tensor | None, full_from: int, fraction: float
    ) -> np.ndarray:
        taus = self.thresholds

        def full(stage: str) -> bool:
            return STAGES.index(stage) >= full_from

        x1 = self.input.step(frame, moved if full_from > 0 else None)
        x2 = self.in_conv2.step(x1, taus["in_conv2"], full("in_conv2"))
        enc1 = self.blocks["enc1"].step([(x2, 0)], taus, "enc1", full("enc1"))
        enc2 = self.blocks["enc2"].step([(enc1, 0)], taus, "enc2", full("enc2"))
        enc3 = self.blocks["enc3"].step([(enc2, 0)], taus, "enc3", full("enc3"))
        dec1 = self.ups["dec1.up"].step(
            self.blocks["dec1"].step([(enc3, 0)], taus, "dec1", full("dec1")), full("dec1.up")
        )
        dec2 = self.ups["dec2.up"].step(
            self.blocks["dec2"].step(
                [(dec1, 0), (enc2, self.dec1_channels)], taus, "dec2", full("dec2")
            ),
            full("dec2.up"),
        )
        dec3 = self.blocks["dec3"].step(
            [(dec2, 0), (enc1, self.dec2_channels)], taus, "dec3", full("dec3")
        )
        labels = self.tail.step(dec3, taus["tail"], taus["output"], full("tail"))
        self.full_from = len(STAGES)
        self.since_refresh = 0 if full_from == 0 else self.since_refresh + 1
        self._record("full" if full_from == 0 else "change", fraction)
        return labels

    def _record(self, mode: FrameMode, fraction: float) -> None:
        changed = {"in_conv1": fraction, "in_conv2": self.in_conv2.changed_fraction}
        for name, block in self.blocks.items():
            changed[name] = block.changed_fraction
            changed[f"{name}.conv2"] = block.conv2.changed_fraction
            changed[f"{name}.conv3"] = block.conv3.changed_fraction
        changed.update(tail=self.tail.changed_fraction, output=self.tail.output_fraction)
        self.stats = ChangeStats(mode, fraction, changed)

    def input_scales(self) -> dict[str, float]:
        """Standard deviation of every thresholded feature map as cached now (calibration's
        units)."""
        scales = {"in_conv2": self.in_conv2.input.interior().std().item()}
        for name, block in self.blocks.items():
            scales[name] = block.preact.interior().std().item()
            scales[f"{name}.conv2"] = block.conv2.input.interior().std().item()
            scales[f"{name}.conv3"] = block.conv3.input.interior().std().item()
        scales.update(tail=self.tail.input_map().std().item(), output=self.tail.logits.std().item())
        return scales

    # -- construction --------------------------------------------------------------------------

    def _build(self, size: tuple[int, int], keep_caches: bool) -> None:
        """Make the stages for frames of ``size``; ``keep_caches`` carries the caches of unchanged
        stages over."""
        s, dense = self.student, self.dense_fraction
        maps = map_sizes(size)
        x1_size, enc1_size, enc2_size, enc3_size = (
            maps["x1"],
            maps["enc1"],
            maps["enc2"],
            maps["enc3"],
        )
        old = self.__dict__.copy() if keep_caches else {}
        self.input = InputStage(
            SparseConv(
                s.in_conv1.weight,
                conv_bias(s.in_conv1),
                2,
                padding=(1, 1),
                in_size=size,
                dense_fraction=dense,
            )
        )
        self.in_conv2 = ConvStage(
            SparseConv(
                s.in_conv2.weight,
                conv_bias(s.in_conv2),
                2,
                padding=(1, 1),
                in_size=x1_size,
                dense_fraction=dense,
            ),
            s.in_conv2.in_channels,
        )
        self.blocks = {
            name: BlockStage(getattr(s, name), in_size, dense)
            for name, in_size in block_input_sizes(size).items()
        }
        self.dec1_channels = self.blocks["dec1"].out_channels
        self.dec2_channels = self.blocks["dec2"].out_channels
        self.ups = {
            "dec1.up": UpsampleStage(
                enc3_size, enc2_size, self.dec1_channels, dense_fraction=dense
            ),
            "dec2.up": UpsampleStage(
                enc2_size, enc1_size, self.dec2_channels, dense_fraction=dense
            ),
        }
        if fused_tail_fits(*size):
            with torch.no_grad():
                self.tail: TailStage | UnfusedTailStage = TailStage(
                    fold_tail(s, *fold_head(s)), enc1_size
                )
        else:
            self.tail = UnfusedTailStage(
                s, enc1_size, x1_size, frame_size=size, dense_fraction=dense
            )
        if keep_caches:
            self._carry_caches(old)
        self.size = size

    def _carry_caches(self, old: dict[str, Any]) -> None:
        """Reuse the old caches: maps are data, the new stages only bring new weights."""
        for name in ("input", "in_conv2", "tail"):
            _carry(old[name], getattr(self, name))
        for name, block in self.blocks.items():
            _carry(old["blocks"][name], block)
        for name, up in self.ups.items():
            _carry(old["ups"][name], up)


def _smoothed(previous: float | None, value: float) -> float:
    return value if previous is None else previous + SMOOTHING * (value - previous)


_CACHES = (
    "reference",
    "input",
    "x",
    "preact",
    "short",
    "long",
    "sums",
    "source",
    "logits",
    "score_labels",
    "labels",
    "conv2",
    "conv3",
    "up",
    "hidden",
    "head",
)


def _carry(old: object, new: object) -> None:
    """Move ``old``'s cache attributes onto ``new`` (a block's sub-stages with the new weights)."""
    for name in _CACHES:
        if not hasattr(new, name):
            continue
        value = getattr(old, name)
        if isinstance(value, ConvStage):
            value.conv = getattr(new, name).conv
        setattr(new, name, value)


__all__ = ["STAGES", "Change", "ChangeBasedStudent", "ChangeStats"]
