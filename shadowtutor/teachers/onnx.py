"""Any segmentation model exported to ONNX, run by onnxruntime.

Input: one NCHW float tensor made from the frame as ``(pixel * scale - mean) / std`` per
channel, in ``channel_order`` (mean and std are given in that order too). A model whose
input height and width are fixed gets frames resized to them (bilinear); a dynamic one gets
``input_size`` if set, else the frame as it is. Output: logits ``(N, C, h, w)`` (argmax over
C) or labels ``(N, h, w)``, resized back to the frame with nearest neighbour. Class names
come from the ``class_names`` option or the model's ``class_names`` metadata (a JSON list).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np

from shadowtutor.teachers.base import (
    TeacherBase,
    TeacherError,
    check_class_names,
    label_dtype,
    resize_labels,
)

TENSORRT, CUDA, CPU = "TensorrtExecutionProvider", "CUDAExecutionProvider", "CPUExecutionProvider"
# Preference order for each ``device`` option; the first one named must be available.
DEVICE_PROVIDERS: dict[str, tuple[str, ...]] = {
    "auto": (TENSORRT, CUDA, CPU),
    "tensorrt": (TENSORRT, CUDA, CPU),
    "cuda": (CUDA, CPU),
    "cpu": (CPU,),
}
_INPUT_TYPES = {"tensor(float)": np.float32, "tensor(float16)": np.float16}


def select_providers(
    device: str, available: Sequence[str]
) -> list[str | tuple[str, dict[str, int]]]:
    """The execution providers to ask for, best first, for ``device`` given what is ``available``.

    ``device`` is a key of :data:`DEVICE_PROVIDERS` or ``cuda:N`` (CUDA's provider on GPU ``N``). A
    device other than ``auto`` whose first provider is missing raises :class:`TeacherError` naming
    the remedies.
    """
    kind, _, index = device.partition(":")
    if kind not in DEVICE_PROVIDERS or (index and (kind != "cuda" or not index.isdigit())):
        raise TeacherError(
            f"unknown device {device!r} for the onnx teacher: use one of {sorted(DEVICE_PROVIDERS)}"
            " or cuda:N"
        )
    wanted = DEVICE_PROVIDERS[kind]
    if kind != "auto" and wanted[0] not in available:
        raise TeacherError(
            f"device {device!r} needs onnxruntime's {wanted[0]}; available: {list(available)}; "
            "install onnxruntime-gpu, or give the teacher a device of its own, e.g. "
            '--teacher-options \'{"device": "cpu"}\''
        )
    chosen = [p for p in wanted if p in available]
    if not chosen:
        raise TeacherError(
            f"onnxruntime offers none of {list(wanted)}; available: {list(available)}"
        )
    if index:
        return [(p, {"device_id": int(index)}) if p == CUDA else p for p in chosen]
    return list(chosen)


def parse_size(size: str | Sequence[int]) -> tuple[int, int]:
    """``"WxH"`` or ``(W, H)`` -> ``(W, H)``, both positive."""
    try:
        parts = size.lower().split("x") if isinstance(size, str) else list(size)
        width, height = (int(p) for p in parts)
    except (ValueError, TypeError):
        raise TeacherError(f"a size is 'WxH' or (W, H), got {size!r}") from None
    if width <= 0 or height <= 0:
        raise TeacherError(f"a size must be positive, got {size!r}")
    return width, height


def _triple(name: str, value: Sequence[float]) -> np.ndarray:
    array = np.asarray(value, dtype=np.float32)
    if array.shape != (3,):
        raise TeacherError(f"{name} needs three values (one per channel), got {value!r}")
    return array


class OnnxTeacher(TeacherBase):
    """A teacher that is any semantic-segmentation network exported to ONNX, run by ONNX Runtime
    (CUDA when asked and present); its outputs map to the student's classes through
    ``class_names``."""

    name = "onnx"

    def __init__(
        self,
        model_path: str | Path,
        class_names: Sequence[str] | None = None,
        device: str = "auto",
        *,
        channel_order: Literal["rgb", "bgr"] = "rgb",
        scale: float = 1 / 255,
        mean: Sequence[float] = (0.0, 0.0, 0.0),
        std: Sequence[float] = (1.0, 1.0, 1.0),
        input_size: str | Sequence[int] | None = None,
        output: Literal["auto", "logits", "labels"] = "auto",
        output_name: str | None = None,
    ) -> None:
        try:
            import onnxruntime
        except ImportError as exc:
            raise TeacherError(
                f"the onnx teacher needs onnxruntime ({exc}): pip install 'shadowtutor[onnx]'"
            ) from exc
        path = Path(model_path)
        if not path.is_file():
            raise TeacherError(f"ONNX model not found: {path}")
        if channel_order not in ("rgb", "bgr"):
            raise TeacherError(f"channel_order is 'rgb' or 'bgr', got {channel_order!r}")
        if output not in ("auto", "logits", "labels"):
            raise TeacherError(f"output is 'auto', 'logits' or 'labels', got {output!r}")
        self.model_path, self.channel_order, self.output = path, channel_order, output
        self._scale, self._mean, self._std = (
            float(scale),
            _triple("mean", mean),
            _triple("std", std),
        )
        if not np.all(self._std != 0):
            raise TeacherError(f"std must not contain zeros, got {std!r}")
        providers = select_providers(device, onnxruntime.get_available_providers())
        try:
            self._session = onnxruntime.InferenceSession(str(path), providers=providers)
        except Exception as exc:
            # onnxruntime raises its own exception types for bad models
            raise TeacherError(f"onnxruntime cannot load {path}: {exc}") from exc
        self.providers = list(self._session.get_providers())
        self.device = "cpu" if self.providers[0] == CPU else "cuda"
        self.class_names = self._resolve_class_names(class_names)
        self._setup_input(input_size)
        outputs = [o.name for o in self._session.get_outputs()]
        self._output_name = output_name or outputs[0]
        if self._output_name not in outputs:
            raise TeacherError(f"{path} has no output {self._output_name!r}; outputs: {outputs}")

    def _resolve_class_names(self, class_names: Sequence[str] | None) -> tuple[str, ...]:
        if class_names is not None:
            return check_class_names(class_names)
        stored = self._session.get_modelmeta().custom_metadata_map.get("class_names")
        if stored is None:
            raise TeacherError(
                f"{self.model_path} carries no 'class_names' metadata: pass class_names=[...]"
            )
        try:
            return check_class_names(json.loads(stored))
        except (json.JSONDecodeError, TypeError):
            raise TeacherError(
                f"the 'class_names' metadata of {self.model_path} is not a JSON list: {stored!r}"
            ) from None

    def _setup_input(self, input_size: str | Sequence[int] | None) -> None:
        spec = self._session.get_inputs()[0]
        if len(spec.shape) != 4 or (isinstance(spec.shape[1], int) and spec.shape[1] != 3):
            raise TeacherError(
                f"the model input {spec.name!r} must be NCHW with 3 channels, got {spec.shape}"
            )
        if spec.type not in _INPUT_TYPES:
            raise TeacherError(f"the model input must be float or float16, got {spec.type}")
        self._input_name, self._input_dtype = spec.name, _INPUT_TYPES[spec.type]
        batch, _, height, width = spec.shape
        self._batch = batch if isinstance(batch, int) else None
        fixed = (width, height) if isinstance(height, int) and isinstance(width, int) else None
        wanted = parse_size(input_size) if input_size is not None else None
        if fixed and wanted and fixed != wanted:
            raise TeacherError(
                f"the model takes a fixed {fixed[0]}x{fixed[1]} input, not {wanted[0]}x{wanted[1]}"
            )
        self.input_size: tuple[int, int] | None = fixed or wanted

    def _prepare(self, frame: np.ndarray) -> np.ndarray:
        import cv2

        if self.input_size is not None and (frame.shape[1], frame.shape[0]) != self.input_size:
            frame = cv2.resize(frame, self.input_size, interpolation=cv2.INTER_LINEAR)
        if self.channel_order == "rgb":
            frame = frame[:, :, ::-1]
        x = (frame.astype(np.float32) * self._scale - self._mean) / self._std
        return x.transpose(2, 0, 1).astype(self._input_dtype)

    def _run(self, batch: np.ndarray) -> np.ndarray:
        """Model output for ``batch`` (N, 3, H, W), in chunks of a fixed batch size (padded)."""
        step = self._batch or len(batch)
        results = []
        for start in range(0, len(batch), step):
            chunk = batch[start : start + step]
            pad = step - len(chunk)
            if pad:
                chunk = np.concatenate([chunk, np.repeat(chunk[-1:], pad, axis=0)])
            (out,) = self._session.run([self._output_name], {self._input_name: chunk})
            results.append(out[: step - pad])
        return np.concatenate(results)

    def _to_labels(self, out: np.ndarray) -> np.ndarray:
        """Raw output (N, C, h, w) logits or (N, h, w) labels -> (N, h, w) class indices."""
        kind = self.output if self.output != "auto" else {4: "logits", 3: "labels"}.get(out.ndim)
        expected_ndim = {"logits": 4, "labels": 3}.get(kind or "")
        if out.ndim != expected_ndim:
            raise TeacherError(
                f"the model output has shape {out.shape}: expected logits (N, C, H, W) or labels "
                "(N, H, W)"
            )
        if kind == "logits":
            if out.shape[1] != len(self.class_names):
                raise TeacherError(
                    f"the model gives {out.shape[1]} channels for {len(self.class_names)} class "
                    "names"
                )
            return out.argmax(axis=1)
        labels = out.astype(np.int64)
        if labels.size and (labels.min() < 0 or labels.max() >= len(self.class_names)):
            raise TeacherError(
                f"the model gives labels {labels.min()}..{labels.max()} for "
                f"{len(self.class_names)} classes"
            )
        return labels

    def _label_batch(
        self, frames: list[np.ndarray], frame_indices: list[int] | None
    ) -> list[np.ndarray]:
        prepared = [self._prepare(f) for f in frames]
        results: dict[int, np.ndarray] = {}
        groups: dict[tuple[int, ...], list[int]] = {}
        for i, x in enumerate(prepared):
            groups.setdefault(x.shape, []).append(i)
        dtype = label_dtype(len(self.class_names))
        for members in groups.values():
            labels = self._to_labels(self._run(np.stack([prepared[i] for i in members])))
            for i, lab in zip(members, labels, strict=True):
                height, width = frames[i].shape[:2]
                results[i] = resize_labels(lab, height, width).astype(dtype)
        return [results[i] for i in range(len(frames))]

    def _details(self) -> dict[str, Any]:
        return {
            "model_path": str(self.model_path),
            "providers": self.providers,
            "channel_order": self.channel_order,
            "input_size": list(self.input_size) if self.input_size else None,
            "output": self.output,
        }
