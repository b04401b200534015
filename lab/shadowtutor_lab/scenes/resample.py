"""Re-sampling a video to a lower frame rate (the paper's Table 7: its videos re-sampled to 7 FPS).

A re-sampled scene keeps the source frame nearest to each instant ``k / fps`` (``k = 0, 1, ...``)
of the source's time span: the same content as the full-rate scene, with more motion between
consecutive frames. Generated and real scenes are re-sampled while they are made, from the
source's own frames, so nothing is encoded twice.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace

from shadowtutor.scene_store import SceneMeta


def sample_indices(frames: int, source_fps: float, fps: float) -> list[int]:
    """The source frames (indices into ``frames`` frames at ``source_fps``) that make the video at ``fps``."""
    if frames <= 0:
        raise ValueError(f"frames must be positive, got {frames}")
    if not (math.isfinite(source_fps) and source_fps > 0):
        raise ValueError(f"the source frame rate must be positive, got {source_fps}")
    if not (math.isfinite(fps) and 0 < fps <= source_fps):
        raise ValueError(f"a re-sampled frame rate must lie in (0, {source_fps:g}] (the source's), got {fps:g}")
    step = source_fps / fps
    indices = []
    k = 0
    while (index := math.floor(k * step + 0.5)) < frames:
        indices.append(index)
        k += 1
    return indices


def sampled_cuts(cuts: Sequence[int], indices: Sequence[int]) -> tuple[int, ...]:
    """Where the source's ``cuts`` fall in the re-sampled video: the first kept frame of each new shot.

    A shot that no kept frame shows leaves no cut; a cut on the first kept frame is none.
    """
    sampled = []
    for cut in cuts:
        position = next((k for k, index in enumerate(indices) if index >= cut), None)
        if position and position not in sampled:
            sampled.append(position)
    return tuple(sampled)


def resampled(meta: SceneMeta, fps: float | None) -> tuple[SceneMeta, list[int]]:
    """The metadata of the video ``meta`` describes re-sampled to ``fps``, and the source frames it keeps;
    ``meta`` itself and every frame when ``fps`` is None."""
    if fps is None:
        return meta, list(range(meta.frames))
    kept = sample_indices(meta.frames, meta.fps, fps)
    return replace(meta, frames=len(kept), fps=float(fps), cuts=sampled_cuts(meta.cuts, kept),
                   source_frames=meta.frames, source_fps=meta.fps), kept
