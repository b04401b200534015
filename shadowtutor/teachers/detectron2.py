"""The paper's teacher as the authors ran it: Mask R-CNN R50-FPN through detectron2.

detectron2 is not on PyPI; where it is not importable, building this teacher raises a
:class:`TeacherError` that points to its install guide and to the ``maskrcnn`` teacher.
Frames go through the model zoo config's own test-time resize, as ``DefaultPredictor``
does, but several at a time; with ``native_resolution`` they go in at their own size, as the
authors fed their 720p frames to the model (``dod_common.get_teacher``).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from shadowtutor.classes import LVS_CLASSES, background_index
from shadowtutor.teachers.base import (
    InstanceTeacherBase,
    TeacherAnswer,
    TeacherError,
    check_class_names,
    check_threshold,
)
from shadowtutor.teachers.class_maps import COCO_CLASSES, checked_class_lut
from shadowtutor.teachers.device import resolve_torch_device
from shadowtutor.teachers.instances import (
    PaintOrder,
    check_paint_order,
    kept_boxes,
    paint_instances,
)

DEFAULT_CONFIG = "COCO-InstanceSegmentation/mask_rcnn_R_50_FPN_3x.yaml"
INSTALL_GUIDE = "https://detectron2.readthedocs.io/en/latest/tutorials/install.html"


def instances_to_teaching(
    instances: Any,
    class_lut: np.ndarray,
    background: int,
    num_classes: int,
    score_threshold: float,
    paint_order: PaintOrder = "score",
) -> TeacherAnswer:
    """detectron2 ``Instances`` (``pred_masks``, ``pred_boxes``, ``scores``, ``pred_classes`` over
    COCO's 80 contiguous ids) -> an ``(H, W)`` map of task class indices and the kept instances'
    boxes."""
    if not hasattr(instances, "pred_masks"):
        raise TeacherError(
            "the detectron2 model gives no instance masks: use an InstanceSegmentation config"
        )
    scores = instances.scores.cpu().numpy()
    labels = paint_instances(
        instances.pred_masks.cpu().numpy(),
        scores,
        instances.pred_classes.cpu().numpy(),
        class_lut,
        background,
        num_classes,
        score_threshold,
        order=paint_order,
    )
    return TeacherAnswer(
        labels, kept_boxes(instances.pred_boxes.tensor.cpu().numpy(), scores, score_threshold)
    )


class Detectron2Teacher(InstanceTeacherBase):
    """``config`` names a detectron2 model zoo config; ``weights_path`` a local checkpoint
    (else the zoo's URL, fetched into detectron2's cache); ``native_resolution`` skips the
    config's test-time resize; ``paint_order`` as in :func:`paint_instances`."""

    name = "detectron2"

    def __init__(
        self,
        class_names: Sequence[str] = LVS_CLASSES,
        weights_path: str | Path | None = None,
        config: str = DEFAULT_CONFIG,
        *,
        device: str = "auto",
        score_threshold: float = 0.5,
        native_resolution: bool = False,
        paint_order: PaintOrder = "score",
    ) -> None:
        self.class_names = check_class_names(class_names)
        self._lut = checked_class_lut(COCO_CLASSES, self.class_names, "COCO")
        self._background = background_index(self.class_names)
        self.score_threshold = check_threshold("score_threshold", score_threshold)
        self.native_resolution = _flag("native_resolution", native_resolution)
        self.paint_order = check_paint_order(paint_order)
        try:
            from detectron2 import model_zoo
            from detectron2.checkpoint import DetectionCheckpointer
            from detectron2.config import get_cfg
            from detectron2.data import transforms
            from detectron2.modeling import build_model
        except ImportError as exc:
            raise TeacherError(
                f"the detectron2 teacher needs detectron2, which cannot be imported ({exc}); "
                "install it "
                f"({INSTALL_GUIDE}) or use the 'maskrcnn' teacher, the same model through "
                "torchvision"
            ) from exc
        self.device = resolve_torch_device(device)
        if weights_path is not None and not Path(weights_path).is_file():
            raise TeacherError(f"detectron2 weights not found: {weights_path}")
        try:
            cfg = get_cfg()
            cfg.merge_from_file(model_zoo.get_config_file(config))
            self.weights_source = (
                str(weights_path) if weights_path else model_zoo.get_checkpoint_url(config)
            )
        except RuntimeError as exc:
            # model_zoo's answer to an unknown config name
            raise TeacherError(f"unknown detectron2 model zoo config {config!r}: {exc}") from exc
        cfg.MODEL.ROI_HEADS.SCORE_THRESH_TEST = self.score_threshold
        cfg.MODEL.DEVICE = self.device
        cfg.MODEL.WEIGHTS = self.weights_source
        self.config = config
        self._model = build_model(cfg).eval()
        try:
            DetectionCheckpointer(self._model).load(self.weights_source)
        except Exception as exc:
            # download or unpickling errors of several types
            raise TeacherError(
                f"cannot load detectron2 weights {self.weights_source}: {exc}; "
                "without internet access pass weights_path=<local model_final_*.pkl>"
            ) from exc
        self._resize = transforms.ResizeShortestEdge(
            [cfg.INPUT.MIN_SIZE_TEST, cfg.INPUT.MIN_SIZE_TEST], cfg.INPUT.MAX_SIZE_TEST
        )
        self._rgb_input = cfg.INPUT.FORMAT == "RGB"

    def _teach_batch(
        self, frames: list[np.ndarray], frame_indices: list[int] | None
    ) -> list[TeacherAnswer]:
        import torch

        inputs = []
        for frame in frames:
            image = frame[:, :, ::-1] if self._rgb_input else frame
            if not self.native_resolution:
                image = self._resize.get_transform(image).apply_image(image)
            tensor = torch.as_tensor(
                np.ascontiguousarray(image.transpose(2, 0, 1)), dtype=torch.float32
            )
            inputs.append({"image": tensor, "height": frame.shape[0], "width": frame.shape[1]})
        with torch.inference_mode():
            outputs = self._model(inputs)
        return [
            instances_to_teaching(
                out["instances"],
                self._lut,
                self._background,
                len(self.class_names),
                self.score_threshold,
                self.paint_order,
            )
            for out in outputs
        ]

    def _details(self) -> dict[str, Any]:
        return {
            "config": self.config,
            "weights": self.weights_source,
            "score_threshold": self.score_threshold,
            "native_resolution": self.native_resolution,
            "paint_order": self.paint_order,
        }


def _flag(name: str, value: bool | str) -> bool:
    """A boolean option, also from text (``--teacher-option native_resolution=true``)."""
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise TeacherError(f"{name} must be true or false, got {value!r}")
