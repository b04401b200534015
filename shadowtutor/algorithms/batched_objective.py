"""Algorithm 1's loss and metric for a batch of sessions, from the back's scores.

:class:`BatchedObjective` holds one batch's teacher labels ``(S, H, W)`` and loss weights ``(S, H,
W)`` and gives, from the scores the sessions' backs produce ``(S, C, h, w)``:

* :meth:`~BatchedObjective.loss`: the sum over sessions of each session's
  :func:`~shadowtutor.algorithms.loss.weighted_cross_entropy` (so that each session's gradient is
  its own);
* :meth:`~BatchedObjective.miou`: each session's :func:`~shadowtutor.algorithms.metrics.miou` of its
  labels (the scores' argmax), computed on the device without reading anything back.

The scores are the frame's logits (``upsample_to`` None) or, for the fused tail, the logits before
their last bilinear upsampling to the frame (``upsample_to`` the frame's ``(H, W)``): that
upsampling then runs here, where a compiled objective never writes the full-resolution logits out.

``compiled`` picks how: eagerly, one PyTorch operation at a time (full-resolution logits,
log-softmax and a confusion matrix in memory), or as ``torch.compile`` (inductor) builds the same
functions, fused into a few kernels that read the scores once (the GPU's memory traffic at full
resolution is the engine's largest). Both compute the same functions: counts are exact, the loss
differs by float rounding; a compiled objective compiles on its first call (seconds to a minute) and
again, once, with a dynamic session count when a batch of another size comes.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch
import torch.nn.functional as F


class BatchedObjective:
    """One batch's loss and metric; see the module's docstring.

    ``target``: teacher labels ``(S, H, W)`` long, each below ``num_classes``; ``weights``: the
    loss's per-pixel weights ``(S, H, W)`` in the scores' dtype; ``upsample_to``: ``(H, W)`` where
    the scores are at a lower resolution and reach the frame by bilinear upsampling
    (``align_corners=False``), None where they are the logits themselves.
    """

    def __init__(
        self,
        target: torch.Tensor,
        weights: torch.Tensor,
        num_classes: int,
        *,
        upsample_to: tuple[int, int] | None,
        compiled: bool,
    ) -> None:
        self.target = target
        self.weights = weights
        self.num_classes = num_classes
        self.upsample_to = upsample_to
        self.compiled = compiled
        self.target_counts = class_counts(target, num_classes)

    def loss(self, scores: torch.Tensor) -> torch.Tensor:
        """The sum over sessions of each session's weighted cross-entropy (mean over its pixels), a
        scalar differentiable in ``scores``."""
        function = _compiled_loss() if self.compiled else weighted_loss
        return function(scores, self.target, self.weights, self.upsample_to)

    def miou(self, scores: torch.Tensor) -> torch.Tensor:
        """Each session's mean IoU ``(S,)`` of its labels against the teacher's, in the scores'
        dtype."""
        function = _compiled_overlaps() if self.compiled else label_overlaps
        intersection, predicted = function(scores, self.target, self.num_classes, self.upsample_to)
        return mean_iou(intersection, predicted, self.target_counts).to(scores.dtype)


def logits_of(scores: torch.Tensor, upsample_to: tuple[int, int] | None) -> torch.Tensor:
    """The frame's logits from the back's scores: ``scores`` upsampled bilinearly to
    ``upsample_to``, or as they are where that is None."""
    if upsample_to is None:
        return scores
    return F.interpolate(scores, size=upsample_to, mode="bilinear", align_corners=False)


def weighted_loss(
    scores: torch.Tensor,
    target: torch.Tensor,
    weights: torch.Tensor,
    upsample_to: tuple[int, int] | None,
) -> torch.Tensor:
    """Sum over sessions of the mean over pixels of ``weight * CE`` of the logits of ``scores``."""
    per_pixel = F.cross_entropy(logits_of(scores, upsample_to), target, reduction="none")
    return (per_pixel * weights).mean(dim=(1, 2)).sum()


def class_counts(labels: torch.Tensor, num_classes: int) -> torch.Tensor:
    """Per session, the pixels of each class ``(S, num_classes)`` long, of label maps ``(S, H,
    W)``."""
    return _counts(labels.reshape(labels.shape[0], -1), num_classes)


def _counts(codes: torch.Tensor, bins: int) -> torch.Tensor:
    """Per row of ``codes`` ``(S, N)`` (values below ``bins``), how often each value occurs ``(S,
    bins)`` long: one ``index_add_`` for all rows, as ``bincount`` on a GPU reads its input's
    extremes back to the host."""
    sessions = codes.shape[0]
    offsets = torch.arange(sessions, device=codes.device).view(-1, 1) * bins
    flat = (offsets + codes).reshape(-1)
    counts = torch.zeros(sessions * bins, dtype=torch.long, device=codes.device)
    counts.index_add_(
        0, flat, torch.ones((), dtype=torch.long, device=codes.device).expand(flat.numel())
    )
    return counts.view(sessions, bins)


def label_overlaps(
    scores: torch.Tensor,
    target: torch.Tensor,
    num_classes: int,
    upsample_to: tuple[int, int] | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per session and class ``(S, num_classes)``: the pixels labelled that class both by the
    scores' argmax and by ``target``, and those labelled it by the argmax
    (:func:`confusion_overlaps` of the argmax)."""
    return confusion_overlaps(logits_of(scores, upsample_to).argmax(1), target, num_classes)


def confusion_overlaps(
    pred: torch.Tensor, target: torch.Tensor, num_classes: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per session and class ``(S, num_classes)`` of label maps ``(S, H, W)``: the pixels of that
    class in both maps, and in ``pred``; through one confusion matrix per session."""
    sessions = pred.shape[0]
    codes = target.reshape(sessions, -1) * num_classes + pred.reshape(sessions, -1)
    confusion = _counts(codes, num_classes * num_classes).view(sessions, num_classes, num_classes)
    return confusion.diagonal(dim1=1, dim2=2), confusion.sum(1)


def overlaps_by_class(
    scores: torch.Tensor,
    target: torch.Tensor,
    num_classes: int,
    upsample_to: tuple[int, int] | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`label_overlaps` as per-class comparisons and sums, the form a compiler fuses into one
    pass over the scores (eagerly it would hold a boolean map per class)."""
    pred = logits_of(scores, upsample_to).argmax(1)
    classes = torch.arange(num_classes, device=pred.device).view(1, -1, 1, 1)
    predicted = pred.unsqueeze(1) == classes
    truth = target.unsqueeze(1) == classes
    return (predicted & truth).sum(dim=(2, 3)), predicted.sum(dim=(2, 3))


def mean_iou(
    intersection: torch.Tensor, predicted: torch.Tensor, truth: torch.Tensor
) -> torch.Tensor:
    """Per session ``(S,)`` float32: :func:`~shadowtutor.algorithms.metrics.miou` from its per-class
    counts ``(S, C)`` of pixels in both maps, in the prediction and in the teacher's labels (classes
    present in either count)."""
    union = predicted + truth - intersection
    present = union > 0
    iou = torch.where(
        present,
        intersection.float() / union.clamp(min=1).float(),
        torch.zeros((), device=union.device),
    )
    return iou.sum(1) / present.sum(1).float()


def batched_miou(pred: torch.Tensor, target: torch.Tensor, num_classes: int) -> torch.Tensor:
    """Per-session mean IoU ``(S,)`` of label maps ``(S, H, W)`` with values below ``num_classes``,
    as :func:`~shadowtutor.algorithms.metrics.miou` computes it for each session, on the device and
    without reading anything back from it."""
    intersection, predicted = confusion_overlaps(pred, target, num_classes)
    return mean_iou(intersection, predicted, class_counts(target, num_classes))


@functools.cache
def _compiled_loss() -> Callable[..., torch.Tensor]:
    return torch.compile(weighted_loss)


@functools.cache
def _compiled_overlaps() -> Callable[..., tuple[torch.Tensor, torch.Tensor]]:
    return torch.compile(overlaps_by_class)
