"""Mean IoU (the paper's eq. 1)."""

from __future__ import annotations

import numpy as np
import torch


def miou(
    pred: torch.Tensor | np.ndarray, label: torch.Tensor | np.ndarray, num_classes: int
) -> float:
    """Mean of IoU_c = |pred_c ∩ label_c| / |pred_c ∪ label_c| over the classes present.

    A class counts as present where it appears in the prediction or in the label (the
    authors' released code): a hallucinated class lowers the score. Both inputs are integer
    label maps of the same shape. Two empty maps give 1.0.
    """
    pred_t = torch.as_tensor(pred).reshape(-1).long()
    label_t = torch.as_tensor(label, device=pred_t.device).reshape(-1).long()
    if pred_t.shape != label_t.shape:
        raise ValueError(f"prediction has {pred_t.numel()} pixels, label has {label_t.numel()}")
    if pred_t.numel() == 0:
        return 1.0
    joint = torch.bincount(label_t * num_classes + pred_t, minlength=num_classes * num_classes)
    confusion = joint[: num_classes * num_classes].reshape(num_classes, num_classes)
    intersection = confusion.diagonal()
    union = confusion.sum(0) + confusion.sum(1) - intersection
    present = union > 0
    return float((intersection[present].float() / union[present].float()).mean())
