"""The distillation loss: cross-entropy, ×5 inside and near objects (the paper, section 5.2).

"Near" follows the authors' release: each object's bounding box grown by 15% (7.5% on
each side) gets the object weight. The boxes are either the teacher's instance boxes, as the
authors use them (:func:`box_weight_map`), or the boxes of the connected regions of
non-background pixels of the teacher's label map, which works for any teacher
(:func:`object_weight_map`).
"""

from __future__ import annotations

import cv2
import numpy as np
import torch
import torch.nn.functional as F

from shadowtutor.algorithms.params import AlgorithmParams


def object_weight_map(
    label: np.ndarray, background: int, object_weight: float = 5.0, box_dilation: float = 0.15
) -> np.ndarray:
    """Per-pixel loss weights ``(H, W)`` float32: ``object_weight`` in the grown bounding boxes of
    the 8-connected regions of non-background pixels, 1 elsewhere.

    The boxes come from the regions' outer borders (``cv2.findContours``), which skip a region lying
    in a hole of another; its grown box lies inside the other's, so the map is the one every
    region's box gives (docs/design/loss_weights.md)."""
    height, width = label.shape
    weights = np.ones((height, width), dtype=np.float32)
    foreground = (label != background).astype(np.uint8)
    borders, _ = cv2.findContours(foreground, cv2.RETR_EXTERNAL, cv2.CHAIN_APPROX_SIMPLE)
    half = box_dilation / 2.0
    for border in borders:
        x, y, w, h = cv2.boundingRect(border)
        dx, dy = int(round(w * half)), int(round(h * half))
        x0, y0 = max(0, x - dx), max(0, y - dy)
        x1, y1 = min(width, x + w + dx), min(height, y + h + dy)
        weights[y0:y1, x0:x1] = object_weight
    return weights


def box_weight_map(
    boxes: np.ndarray,
    shape: tuple[int, int],
    object_weight: float = 5.0,
    box_dilation: float = 0.15,
) -> np.ndarray:
    """Per-pixel loss weights ``(H, W)`` float32: ``object_weight`` in the grown ``boxes``, 1
    elsewhere.

    ``boxes``: ``(N, 4)`` ``x0, y0, x1, y1`` in pixels (a detector's boxes). The authors' arithmetic
    (``dod_server.loss_mask``): each side moves out by ``box_dilation / 2`` of the box's size, the
    corners are truncated to integers and clamped to the frame, and both end rows/columns are
    inside.
    """
    height, width = shape
    weights = np.ones((height, width), dtype=np.float32)
    boxes = np.asarray(boxes, dtype=np.float64).reshape(-1, 4)
    half = box_dilation / 2.0
    x0, y0, x1, y1 = boxes.T
    dx, dy = half * (x1 - x0), half * (y1 - y0)
    # truncation, as int()
    grown = np.stack([x0 - dx, y0 - dy, x1 + dx, y1 + dy], axis=1).astype(np.int64)
    grown[:, 0::2] = grown[:, 0::2].clip(0, width)
    grown[:, 1::2] = grown[:, 1::2].clip(0, height)
    for gx0, gy0, gx1, gy1 in grown:
        weights[gy0 : gy1 + 1, gx0 : gx1 + 1] = object_weight
    return weights


def key_frame_weights(
    label: np.ndarray, boxes: np.ndarray | None, background: int, params: AlgorithmParams
) -> np.ndarray:
    """The weight map ``params.weight_map`` asks for: the teacher's instance ``boxes`` where given,
    else the label map's regions."""
    if params.weight_map == "instances" and boxes is not None:
        return box_weight_map(boxes, label.shape, params.object_weight, params.box_dilation)
    return object_weight_map(label, background, params.object_weight, params.box_dilation)


def weighted_cross_entropy(
    logits: torch.Tensor, label: torch.Tensor, weights: torch.Tensor
) -> torch.Tensor:
    """Mean over pixels of ``weight * CE``; ``logits (1, C, H, W)``, ``label``/``weights (H,
    W)``."""
    per_pixel = F.cross_entropy(logits, label.unsqueeze(0).long(), reduction="none")
    return (per_pixel * weights.unsqueeze(0)).mean()
