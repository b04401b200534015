"""Instance masks (Mask R-CNN output) -> one semantic label map.

Painting rule: instances scoring below ``score_threshold`` and instances whose class maps to the
background are dropped; the rest are painted in ascending ``order``: ``score`` (where masks overlap
the highest-scoring instance ends on top; equal scores: the later one in the detector's order wins)
or ``class``, the authors' rule (``dod_server.sem_seg_label``: each task class's masks together, in
class-index order, so a later class such as bicycle lies over an earlier one such as person,
whatever the scores). A pixel belongs to a mask when the mask is ``True`` there (bool masks) or its
probability is above ``mask_threshold``; pixels no kept mask covers are background.
"""

from __future__ import annotations

from typing import Literal

import numpy as np

from shadowtutor.teachers.base import TeacherError, label_dtype

PaintOrder = Literal["score", "class"]
PAINT_ORDERS: tuple[PaintOrder, ...] = ("score", "class")


def check_paint_order(order: str) -> PaintOrder:
    if order not in PAINT_ORDERS:
        raise TeacherError(f"paint_order must be one of {PAINT_ORDERS}, got {order!r}")
    return order


def kept_boxes(boxes: np.ndarray, scores: np.ndarray, score_threshold: float = 0.5) -> np.ndarray:
    """The ``(N, 4)`` float32 boxes of the instances scoring at least ``score_threshold``, of any
    class (the authors weight the loss near every detected object, not only the task's classes)."""
    return np.asarray(boxes, dtype=np.float32).reshape(-1, 4)[np.asarray(scores) >= score_threshold]


def paint_instances(
    masks: np.ndarray,
    scores: np.ndarray,
    class_ids: np.ndarray,
    class_lut: np.ndarray,
    background: int,
    num_classes: int,
    score_threshold: float = 0.5,
    mask_threshold: float = 0.5,
    order: PaintOrder = "score",
) -> np.ndarray:
    """Paint ``N`` instances into an ``(H, W)`` map of task class indices.

    ``masks``: ``(N, H, W)`` or ``(N, 1, H, W)``, bool or probabilities; ``scores``: ``(N,)``;
    ``class_ids``: ``(N,)`` indices into ``class_lut`` (the detector's own class ids), which
    maps them to task classes (see :mod:`shadowtutor.teachers.class_maps`).
    """
    if masks.ndim == 4 and masks.shape[1] == 1:
        masks = masks[:, 0]
    if masks.ndim != 3:
        raise TeacherError(f"instance masks must be (N, H, W) or (N, 1, H, W), got {masks.shape}")
    n = masks.shape[0]
    if scores.shape != (n,) or class_ids.shape != (n,):
        raise TeacherError(f"{n} masks but scores {scores.shape} and class ids {class_ids.shape}")
    out = np.full(masks.shape[1:], background, dtype=label_dtype(num_classes))
    sequence, task_ids = paint_sequence(
        scores, class_ids, class_lut, background, score_threshold, order
    )
    for i in sequence:
        out[masks[i] if masks.dtype == np.bool_ else masks[i] > mask_threshold] = task_ids[i]
    return out


def paint_sequence(
    scores: np.ndarray,
    class_ids: np.ndarray,
    class_lut: np.ndarray,
    background: int,
    score_threshold: float = 0.5,
    order: PaintOrder = "score",
) -> tuple[np.ndarray, np.ndarray]:
    """``(sequence, task_ids)``: the indices of the instances to paint, in the order they are
    painted (the last one painted ends on top), and every instance's task class
    (``class_lut[class_ids]``).

    This is the painting rule of the module, shared by :func:`paint_instances` and painters that
    work elsewhere (e.g. on the detector's device), so that all paint the same map.
    """
    n = scores.shape[0]
    if class_ids.shape != (n,):
        raise TeacherError(f"{n} scores but class ids {class_ids.shape}")
    if n and (class_ids.min() < 0 or class_ids.max() >= len(class_lut)):
        raise TeacherError(
            f"class ids must lie in [0, {len(class_lut)}), got {class_ids.min()}..{class_ids.max()}"
        )
    task_ids = class_lut[class_ids.astype(np.int64)]
    keep = np.flatnonzero((scores >= score_threshold) & (task_ids != background))
    key = scores[keep] if check_paint_order(order) == "score" else task_ids[keep]
    return keep[np.argsort(key, kind="stable")], task_ids
