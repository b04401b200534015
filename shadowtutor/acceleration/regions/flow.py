"""The flow path's motion estimate: OpenCV's DIS dense optical flow, and label warping by it.

DIS (Kroeger et al., ECCV 2016; ``cv2.DISOpticalFlow``) is the default because it is the
fastest dense flow in OpenCV at a quality that suits label warping, runs on any CPU (ARM
included) with no model weights, and is maintained in OpenCV's main modules. Farneback and
DIS's slower presets are kept selectable for the comparison in ``shadowtutor bench regions``
(docs/results/regions/). Flow is estimated on grey images downscaled by ``scale``; full
scale is the default: on the moving scenes, at the same speed-up over the student, it lost
fewer mIoU points than half scale or DIS's medium preset (docs/results/regions/flow_context.md).
"""

from __future__ import annotations

from dataclasses import dataclass

import cv2
import numpy as np

FLOW_METHODS = ("dis-ultrafast", "dis-fast", "dis-medium", "farneback")
_DIS_PRESETS = {
    "dis-ultrafast": cv2.DISOPTICAL_FLOW_PRESET_ULTRAFAST,
    "dis-fast": cv2.DISOPTICAL_FLOW_PRESET_FAST,
    "dis-medium": cv2.DISOPTICAL_FLOW_PRESET_MEDIUM,
}


@dataclass(frozen=True)
class FlowResult:
    """Flow from the current image to its key at the flow scale: ``current(p) ~ key(p + flow(p))``."""

    flow: np.ndarray  # float32 (h, w, 2), pixels of the downscaled image
    residual: np.ndarray  # float32 (h, w): |key warped to now - current|, grey levels
    unwarped: np.ndarray  # float32 (h, w): |key - current| without warping, grey levels

    @property
    def difference(self) -> float:
        """Mean |key - current| without warping, grey levels."""
        return float(self.unwarped.mean())

    def part(self, box: tuple[int, int, int, int]) -> FlowResult:
        """The result inside ``box`` (x0, y0, x1, y1 at the flow scale): one region of a wider estimate."""
        x0, y0, x1, y1 = box
        return FlowResult(self.flow[y0:y1, x0:x1], self.residual[y0:y1, x0:x1], self.unwarped[y0:y1, x0:x1])


class FlowEstimator:
    """Dense flow between downscaled grey regions, and warping of full-size label maps by it."""

    def __init__(self, method: str = "dis-ultrafast", scale: float = 1.0) -> None:
        if method not in FLOW_METHODS:
            raise ValueError(f"unknown flow method {method!r}: choose one of {', '.join(FLOW_METHODS)}")
        if not 0 < scale <= 1:
            raise ValueError(f"flow scale must lie in (0, 1], got {scale}")
        self.method = method
        self.scale = scale
        self._dis = cv2.DISOpticalFlow_create(_DIS_PRESETS[method]) if method in _DIS_PRESETS else None

    def small_grey(self, frame_bgr: np.ndarray) -> np.ndarray:
        """The grey frame at the flow scale (computed once per frame, then cut per region)."""
        grey = cv2.cvtColor(frame_bgr, cv2.COLOR_BGR2GRAY)
        if self.scale == 1:
            return grey
        h, w = grey.shape
        return cv2.resize(grey, (max(1, round(w * self.scale)), max(1, round(h * self.scale))),
                          interpolation=cv2.INTER_AREA)

    def small_box(self, box: tuple[int, int, int, int]) -> tuple[int, int, int, int]:
        return tuple(round(v * self.scale) for v in box)  # type: ignore[return-value]

    def estimate(self, current: np.ndarray, key: np.ndarray) -> FlowResult:
        """Flow from ``current`` to ``key`` (grey uint8 of one shape) and how well it explains ``current``."""
        current, key = np.ascontiguousarray(current), np.ascontiguousarray(key)
        if self._dis is not None:
            flow = self._dis.calc(current, key, None)
        else:
            flow = cv2.calcOpticalFlowFarneback(current, key, None, 0.5, 3, 15, 3, 5, 1.2, 0)
        warped = cv2.remap(key, *_maps(flow), cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE)
        residual = cv2.absdiff(warped, current).astype(np.float32)
        return FlowResult(flow, residual, cv2.absdiff(key, current).astype(np.float32))

    def warp_labels(self, key_labels: np.ndarray, result: FlowResult) -> np.ndarray:
        """``key_labels`` (the key's labels over the estimate's area, full size) moved to now by the flow."""
        h, w = key_labels.shape
        fh, fw = result.flow.shape[:2]
        flow = cv2.resize(result.flow, (w, h), interpolation=cv2.INTER_LINEAR)
        flow[..., 0] *= w / fw
        flow[..., 1] *= h / fh
        return cv2.remap(key_labels, *_maps(flow), cv2.INTER_NEAREST, borderMode=cv2.BORDER_REPLICATE)


def _maps(flow: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    h, w = flow.shape[:2]
    xs = np.arange(w, dtype=np.float32)[None, :] + flow[..., 0]
    ys = np.arange(h, dtype=np.float32)[:, None] + flow[..., 1]
    return xs, ys
