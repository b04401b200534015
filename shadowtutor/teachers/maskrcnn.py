"""The paper's teacher: torchvision's Mask R-CNN R50-FPN trained on COCO.

Weights come from ``weights_path`` (a state dict file, or a torchvision-references checkpoint
holding one under ``"model"``) or else from ``weights_url`` (default: torchvision's
``MaskRCNN_ResNet50_FPN_Weights.COCO_V1``) through ``torch.hub``'s download-and-cache, which
keeps files in ``$TORCH_HOME/hub/checkpoints`` and reuses a file already there.

A batch of frames goes through the model as one list (one batched backbone, RPN and heads
pass); the masks are pasted, thresholded and painted on the model's device
(:mod:`shadowtutor.teachers.device_paint`) and one label map per frame comes back to the host.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from shadowtutor.classes import LVS_CLASSES, background_index
from shadowtutor.models.precision import (
    Precision,
    bf16_autocast,
    check_precision,
    float32_precision,
)
from shadowtutor.teachers.base import (
    InstanceTeacherBase,
    TeacherAnswer,
    TeacherError,
    check_class_names,
    check_threshold,
)
from shadowtutor.teachers.class_maps import COCO_CATEGORY_NAMES, checked_class_lut
from shadowtutor.teachers.device import resolve_torch_device
from shadowtutor.teachers.device_paint import paint_frames
from shadowtutor.teachers.instances import PaintOrder, check_paint_order

if TYPE_CHECKING:
    import torch
    from torchvision.models.detection import MaskRCNN


def _default_weights_url() -> str:
    from torchvision.models.detection import MaskRCNN_ResNet50_FPN_Weights

    return MaskRCNN_ResNet50_FPN_Weights.COCO_V1.url


def load_maskrcnn_state_dict(
    weights_path: str | Path | None = None, weights_url: str | None = None
) -> tuple[Mapping[str, torch.Tensor], str]:
    """Return ``(state_dict, source)`` from a local file or the download cache."""
    import torch

    if weights_path is not None:
        path = Path(weights_path)
        if not path.is_file():
            raise TeacherError(f"Mask R-CNN weights not found: {path}")
        try:
            blob = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as exc:
            # torch raises several types for unreadable files
            raise TeacherError(f"cannot read Mask R-CNN weights {path}: {exc}") from exc
        if isinstance(blob, Mapping) and isinstance(blob.get("model"), Mapping):
            blob = blob["model"]
        if not isinstance(blob, Mapping):
            raise TeacherError(f"{path} holds a {type(blob).__name__}, not a state dict")
        return blob, str(path)
    url = weights_url or _default_weights_url()
    try:
        state_dict = torch.hub.load_state_dict_from_url(
            url, map_location="cpu", progress=True, check_hash=True, weights_only=True
        )
    except Exception as exc:
        # URLError, HTTPError, OSError, hash mismatch, unpickling errors
        cache = Path(torch.hub.get_dir()) / "checkpoints" / Path(url).name
        raise TeacherError(
            f"cannot fetch Mask R-CNN weights from {url}: {exc}. Without internet access, copy the "
            f"file to {cache} (set TORCH_HOME to move that cache) or pass weights_path=<state "
            "dict file>"
        ) from exc
    return state_dict, url


def build_maskrcnn(state_dict: Mapping[str, torch.Tensor], **model_options: Any) -> MaskRCNN:
    """torchvision's ``maskrcnn_resnet50_fpn`` (91 COCO classes) holding ``state_dict``, in eval
    mode."""
    from torchvision.models.detection import maskrcnn_resnet50_fpn

    model = maskrcnn_resnet50_fpn(
        weights=None, weights_backbone=None, num_classes=91, **model_options
    )
    try:
        model.load_state_dict(state_dict)
    except RuntimeError as exc:
        raise TeacherError(
            f"the weights do not fit torchvision's Mask R-CNN R50-FPN with 91 classes: {exc}"
        ) from None
    return model.eval()


def detect(
    model: MaskRCNN, images: list[torch.Tensor], precision: Precision = "fp32"
) -> list[dict[str, torch.Tensor]]:
    """torchvision's Mask R-CNN forward in eval mode for RGB ``(3, H, W)`` float images, up to the
    paste: per image ``boxes`` ``(N, 4)`` in the image's pixels, ``scores``, ``labels`` (COCO ids)
    and ``masks`` ``(N, 1, 28, 28)`` probabilities over each box, all float32 on the model's device.
    ``model(images)`` gives the same detections with the masks pasted into full images.
    """
    from torchvision.models.detection.transform import resize_boxes

    sizes = [(int(image.shape[-2]), int(image.shape[-1])) for image in images]
    with float32_precision(images[0].device, precision):
        batch, _ = model.transform(images)
        with bf16_autocast(images[0].device, precision):
            features = model.backbone(batch.tensors)
        features = OrderedDict((name, value.float()) for name, value in features.items())
        proposals, _ = model.rpn(batch, features)
        detections, _ = model.roi_heads(features, proposals, batch.image_sizes)
    out = []
    for det, resized, size in zip(detections, batch.image_sizes, sizes, strict=True):
        boxes = resize_boxes(det["boxes"], resized, size)
        out.append(
            {
                "boxes": boxes.float(),
                "scores": det["scores"].float(),
                "labels": det["labels"],
                "masks": det["masks"].float(),
            }
        )
    return out


class MaskRCNNTeacher(InstanceTeacherBase):
    """Mask R-CNN instances above ``score_threshold`` painted into the task's classes.

    ``min_size``/``max_size`` set the detector's own input resize (torchvision's 800/1333);
    painting follows :func:`shadowtutor.teachers.instances.paint_instances` in ``paint_order``.
    The boxes it gives are those of every kept instance, of any COCO class. ``precision``
    (:mod:`shadowtutor.models.precision`): ``fp32`` (default), ``tf32`` or ``bf16``.
    """

    name = "maskrcnn"

    def __init__(
        self,
        class_names: Sequence[str] = LVS_CLASSES,
        weights_path: str | Path | None = None,
        weights_url: str | None = None,
        *,
        device: str = "auto",
        score_threshold: float = 0.5,
        mask_threshold: float = 0.5,
        min_size: int = 800,
        max_size: int = 1333,
        paint_order: PaintOrder = "score",
        precision: Precision = "fp32",
    ) -> None:
        self.class_names = check_class_names(class_names)
        self._lut = checked_class_lut(COCO_CATEGORY_NAMES, self.class_names, "COCO")
        self._background = background_index(self.class_names)
        self.score_threshold = check_threshold("score_threshold", score_threshold)
        self.mask_threshold = check_threshold("mask_threshold", mask_threshold)
        if not 0 < int(min_size) <= int(max_size):
            raise TeacherError(f"need 0 < min_size <= max_size, got {min_size} and {max_size}")
        self.min_size, self.max_size = int(min_size), int(max_size)
        self.paint_order = check_paint_order(paint_order)
        try:
            self.precision = check_precision(precision)
        except ValueError as exc:
            raise TeacherError(str(exc)) from None
        self.device = resolve_torch_device(device)
        state_dict, self.weights_source = load_maskrcnn_state_dict(weights_path, weights_url)
        self._model = build_maskrcnn(
            state_dict,
            min_size=self.min_size,
            max_size=self.max_size,
            box_score_thresh=self.score_threshold,
        ).to(self.device)

    def _teach_batch(
        self, frames: list[np.ndarray], frame_indices: list[int] | None
    ) -> list[TeacherAnswer]:
        import torch

        with torch.inference_mode():
            detections = detect(self._model, [self._upload(f) for f in frames], self.precision)
            return paint_frames(
                detections,
                [f.shape[:2] for f in frames],
                self._lut,
                self._background,
                len(self.class_names),
                self.score_threshold,
                self.mask_threshold,
                self.paint_order,
            )

    def _upload(self, frame: np.ndarray) -> torch.Tensor:
        """BGR ``uint8`` ``(H, W, 3)`` -> RGB float ``(3, H, W)`` in [0, 1] on the device (through
        pinned memory, asynchronously, on the current stream for CUDA)."""
        import torch

        pixels = torch.from_numpy(frame)
        if self.device != "cpu":
            pixels = pixels.pin_memory().to(self.device, non_blocking=True)
        return pixels.permute(2, 0, 1).flip(0).float().div_(255)

    def _details(self) -> dict[str, Any]:
        return {
            "model": "torchvision maskrcnn_resnet50_fpn (COCO)",
            "weights": self.weights_source,
            "score_threshold": self.score_threshold,
            "mask_threshold": self.mask_threshold,
            "min_size": self.min_size,
            "max_size": self.max_size,
            "paint_order": self.paint_order,
            "precision": self.precision,
        }
