"""Instance masks -> label maps, painted on the detector's device; one label map per frame to the
host.

Input, per frame: a torchvision-style detection dict *before* its masks are pasted into the image:
``boxes`` ``(N, 4)`` float in the frame's pixels, ``scores`` ``(N,)``, ``labels`` ``(N,)`` (the
detector's class ids) and ``masks`` ``(N, 1, M, M)`` probabilities over each box (what Mask R-CNN's
mask head gives). Output: a :class:`~shadowtutor.teachers.base.Teaching` per frame with the label
map ``(H, W)`` (:func:`~shadowtutor.teachers.base.label_dtype`) in host memory and the kept boxes.

Guarantee: the labels are those of torchvision's ``paste_masks_in_image`` followed by
``mask > mask_threshold`` and :func:`~shadowtutor.teachers.instances.paint_instances` on the host.
Each painted instance's mask is resized by the same ``F.interpolate`` call on the same values, into
the same pixels, so the maps are identical, element for element, on any device. What differs is
the work: only the instances that get painted are pasted, each only over its box (not a float
image per detection), the map is painted where the masks are, and what crosses to the host is one
small table of the detections (one synchronisation) and the finished maps (pinned memory,
asynchronous copies, one synchronisation per call, on the calling thread's current CUDA stream).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np

from shadowtutor.teachers.base import Teaching, label_dtype
from shadowtutor.teachers.instances import PaintOrder, kept_boxes, paint_sequence

if TYPE_CHECKING:
    import torch

# columns of the per-detection table copied to the host
_BOXES, _CELLS, _SCORE, _CLASS = slice(0, 4), slice(4, 8), 8, 9


def paint_frames(
    detections: Sequence[Mapping[str, torch.Tensor]],
    frame_sizes: Sequence[tuple[int, int]],
    class_lut: np.ndarray,
    background: int,
    num_classes: int,
    score_threshold: float = 0.5,
    mask_threshold: float = 0.5,
    order: PaintOrder = "score",
) -> list[Teaching]:
    """Label maps ``(height, width)`` of ``frame_sizes`` from the frames' ``detections`` (see the
    module)."""
    import torch
    from torchvision.models.detection.roi_heads import expand_boxes, expand_masks

    if len(detections) != len(frame_sizes):
        raise ValueError(f"{len(detections)} detection sets for {len(frame_sizes)} frames")
    if not detections:
        return []
    device = detections[0]["boxes"].device
    padded, rows = [], []
    for det in detections:
        # torchvision's paste, step 1
        masks, scale = expand_masks(det["masks"], padding=1)
        cells = expand_boxes(det["boxes"], scale).to(dtype=torch.int64)
        padded.append(masks)
        rows.append(
            torch.cat(
                [
                    det["boxes"].double(),
                    cells.double(),
                    det["scores"].double()[:, None],
                    det["labels"].double()[:, None],
                ],
                dim=1,
            )
        )
    # float32 scores and boxes, int64 ids: exact in float64
    table = torch.cat(rows).cpu().numpy()
    dtype = torch.uint8 if label_dtype(num_classes) == np.uint8 else torch.int64
    canvases, boxes, start = [], [], 0
    for masks, (height, width) in zip(padded, frame_sizes, strict=True):
        part, start = table[start : start + len(masks)], start + len(masks)
        scores = part[:, _SCORE].astype(np.float32)
        sequence, task_ids = paint_sequence(
            scores, part[:, _CLASS].astype(np.int64), class_lut, background, score_threshold, order
        )
        canvas = torch.full((height, width), background, dtype=dtype, device=device)
        cells = part[:, _CELLS].astype(np.int64)
        for i in sequence.tolist():
            _paint_one(canvas, masks[i, 0], cells[i].tolist(), int(task_ids[i]), mask_threshold)
        canvases.append(canvas)
        boxes.append(kept_boxes(part[:, _BOXES].astype(np.float32), scores, score_threshold))
    return [Teaching(labels, b) for labels, b in zip(_to_host(canvases), boxes, strict=True)]


def _paint_one(
    canvas: torch.Tensor, mask: torch.Tensor, cell: list[int], task_id: int, threshold: float
) -> None:
    """Paint ``task_id`` where ``mask`` (``(M, M)``, padded) resized into ``cell`` (``x0, y0, x1,
    y1``, inclusive, possibly past the canvas) exceeds ``threshold``: torchvision's
    ``paste_mask_in_image``."""
    import torch.nn.functional as F

    x0, y0, x1, y1 = cell
    height, width = canvas.shape
    left, right, top, bottom = max(x0, 0), min(x1 + 1, width), max(y0, 0), min(y1 + 1, height)
    if left >= right or top >= bottom:
        return
    size = (max(y1 - y0 + 1, 1), max(x1 - x0 + 1, 1))
    resized = F.interpolate(
        mask.expand((1, 1, -1, -1)), size=size, mode="bilinear", align_corners=False
    )[0, 0]
    inside = resized[top - y0 : bottom - y0, left - x0 : right - x0] > threshold
    canvas[top:bottom, left:right].masked_fill_(inside, task_id)


def _to_host(canvases: list[torch.Tensor]) -> list[np.ndarray]:
    """The maps as NumPy arrays, through :func:`~shadowtutor.models.host_copy.to_host` (CUDA ones
    copied into pinned memory on the current stream, waited for once; CPU ones as they are)."""
    from shadowtutor.models.host_copy import to_host

    return [host.numpy() for host in to_host(canvases)]
