"""The flow path's motion estimate: OpenCV's DIS dense optical flow, and label warping by it.

:data:`FLOW_METHODS`: DIS (Kroeger et al., ECCV 2016; ``cv2.DISOpticalFlow``) at its ultrafast
preset, the default, runs on any CPU with no model weights; DIS's slower presets and Farneback are
selectable. Flow is estimated on grey images downscaled by ``scale`` (full scale by default).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property, lru_cache

import cv2
import numpy as np

FLOW_METHODS = ("dis-ultrafast", "dis-fast", "dis-medium", "farneback")
_DIS_PRESETS = {
    "dis-ultrafast": cv2.DISOPTICAL_FLOW_PRESET_ULTRAFAST,
    "dis-fast": cv2.DISOPTICAL_FLOW_PRESET_FAST,
    "dis-medium": cv2.DISOPTICAL_FLOW_PRESET_MEDIUM,
}


@dataclass(kw_only=True, frozen=True)
class FlowPart:
    """The flow and how well it explains the current image, over one area (a region of an estimate),
    read at every ``step``-th pixel of each row and column."""

    # float32 (h, w, 2), pixels of the downscaled image
    flow: np.ndarray
    # float32 (h, w): |key warped to now - current|, grey levels
    residual: np.ndarray
    # float32 (h, w): |key - current| without warping, grey levels
    unwarped: np.ndarray
    # (width, height) of the area at the flow scale, before sampling
    size: tuple[int, int]

    @property
    def difference(self) -> float:
        """Mean |key - current| without warping, grey levels."""
        return float(self.unwarped.mean())


class FlowResult:
    """Flow from the current image to its key at the flow scale: ``current(p) ~ key(p +
    flow(p))``."""

    def __init__(self, flow: np.ndarray, current: np.ndarray, key: np.ndarray) -> None:
        # float32 (h, w, 2), pixels of the downscaled image
        self.flow = flow
        self.current = current
        self.key = key

    @cached_property
    def maps(self) -> np.ndarray:
        """float32 (h, w, 2): where each current pixel comes from in the key (``cv2.remap``'s
        map)."""
        return _maps(self.flow)

    def part(self, box: tuple[int, int, int, int] | None = None, step: int = 1) -> FlowPart:
        """The result inside ``box`` (x0, y0, x1, y1 at the flow scale; None: all of it) at every
        ``step``-th pixel: the residuals are computed there only (the decision network reads them, a
        fixed key interval never does)."""
        x0, y0, x1, y1 = box or (0, 0, self.flow.shape[1], self.flow.shape[0])
        area = (slice(y0, y1, step), slice(x0, x1, step))
        flow = np.ascontiguousarray(self.flow[area])
        maps = _pixel_grid(*self.flow.shape[:2])[area] + flow
        warped = cv2.remap(  # type: ignore[call-overload]  # None: no second map (OpenCV's stubs want a Mat)
            self.key, maps, None, cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE
        )
        current = np.ascontiguousarray(self.current[area])
        return FlowPart(
            flow=flow,
            residual=cv2.absdiff(warped, current).astype(np.float32),
            unwarped=cv2.absdiff(np.ascontiguousarray(self.key[area]), current).astype(np.float32),
            size=(x1 - x0, y1 - y0),
        )


class FlowEstimator:
    """Dense flow between downscaled grey regions, and warping of full-size label maps by it."""

    def __init__(self, method: str = "dis-ultrafast", scale: float = 1.0) -> None:
        if method not in FLOW_METHODS:
            raise ValueError(
                f"unknown flow method {method!r}: choose one of {', '.join(FLOW_METHODS)}"
            )
        if not 0 < scale <= 1:
            raise ValueError(f"flow scale must lie in (0, 1], got {scale}")
        self.method = method
        self.scale = scale
        self._dis = (
            cv2.DISOpticalFlow.create(_DIS_PRESETS[method]) if method in _DIS_PRESETS else None
        )

    def small_grey(self, frame_bgr: np.ndarray) -> np.ndarray:
        """The grey frame at the flow scale (computed once per frame, then cut per region)."""
        grey = cv2.cvtColor(frame_bgr, cv2.COLOR_BGR2GRAY)
        if self.scale == 1:
            return grey
        h, w = grey.shape
        return cv2.resize(
            grey,
            (max(1, round(w * self.scale)), max(1, round(h * self.scale))),
            interpolation=cv2.INTER_AREA,
        )

    def small_box(self, box: tuple[int, int, int, int]) -> tuple[int, int, int, int]:
        x0, y0, x1, y1 = (round(v * self.scale) for v in box)
        return x0, y0, x1, y1

    def estimate(self, current: np.ndarray, key: np.ndarray) -> FlowResult:
        """Flow from ``current`` to ``key`` (grey uint8 of one shape) and how well it explains
        ``current``."""
        current, key = np.ascontiguousarray(current), np.ascontiguousarray(key)
        if self._dis is not None:
            flow = self._dis.calc(current, key, None)  # type: ignore[call-overload]  # None: no initial flow
        else:
            flow = cv2.calcOpticalFlowFarneback(  # type: ignore[call-overload]  # None: no initial flow (stubs: a Mat)
                current, key, None, 0.5, 3, 15, 3, 5, 1.2, 0
            )
        return FlowResult(flow, current, key)

    def warp_labels(self, key_labels: np.ndarray, result: FlowResult) -> np.ndarray:
        """``key_labels`` (the key's labels over the estimate's area, full size) moved to now by the
        flow."""
        h, w = key_labels.shape
        fh, fw = result.flow.shape[:2]
        # full scale: the estimate's own map
        if (h, w) == (fh, fw):
            maps = result.maps
        else:
            flow = cv2.resize(result.flow, (w, h), interpolation=cv2.INTER_LINEAR)
            flow *= np.array([w / fw, h / fh], dtype=np.float32)
            maps = _maps(flow)
        return cv2.remap(  # type: ignore[call-overload]  # None: no second map (OpenCV's stubs want a Mat)
            key_labels, maps, None, cv2.INTER_NEAREST, borderMode=cv2.BORDER_REPLICATE
        )


def _maps(flow: np.ndarray) -> np.ndarray:
    return _pixel_grid(*flow.shape[:2]) + flow


@lru_cache(maxsize=8)
def _pixel_grid(height: int, width: int) -> np.ndarray:
    """float32 (height, width, 2): each pixel's own (x, y); read-only, shared."""
    grid = np.empty((height, width, 2), dtype=np.float32)
    grid[..., 0] = np.arange(width, dtype=np.float32)[None, :]
    grid[..., 1] = np.arange(height, dtype=np.float32)[:, None]
    grid.flags.writeable = False
    return grid
