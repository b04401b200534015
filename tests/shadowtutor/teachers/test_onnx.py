from __future__ import annotations

import json
import warnings
from pathlib import Path

import cv2
import numpy as np
import pytest
import torch
from torch import nn

from shadowtutor.teachers import TeacherError, build_teacher
from shadowtutor.teachers.base import resize_labels
from shadowtutor.teachers.onnx import CPU, CUDA, TENSORRT, OnnxTeacher, parse_size, select_providers

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

NAMES = ["background", "person", "auto", "dog"]
MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


class TinySeg(nn.Module):
    """Logits at half resolution (so the teacher must resize them back)."""

    def __init__(self, labels_out: bool = False) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.body = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 4, 3, stride=2, padding=1))
        self.labels_out = labels_out

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.body(x)
        return y.argmax(dim=1) if self.labels_out else y


def export(module: nn.Module, path: Path, dynamic: bool = True, size=(48, 64), names=NAMES) -> Path:
    dynamic_axes = {"image": {0: "n", 2: "h", 3: "w"}} if dynamic else None
    with warnings.catch_warnings():  # the TorchScript exporter is deprecated; the new one needs onnxscript
        warnings.simplefilter("ignore", DeprecationWarning)
        torch.onnx.export(module.eval(), (torch.zeros(1, 3, *size),), str(path), input_names=["image"],
                          output_names=["out"], dynamic_axes=dynamic_axes, dynamo=False)
    if names is not None:
        model = onnx.load(str(path))
        entry = model.metadata_props.add()
        entry.key, entry.value = "class_names", json.dumps(names)
        onnx.save(model, str(path))
    return path


def expected_labels(module: TinySeg, frame: np.ndarray, size: tuple[int, int] | None = None) -> np.ndarray:
    image = cv2.resize(frame, size, interpolation=cv2.INTER_LINEAR) if size else frame
    x = (image[:, :, ::-1].astype(np.float32) / 255 - np.array(MEAN, np.float32)) / np.array(STD, np.float32)
    with torch.no_grad():
        logits = module(torch.from_numpy(x.transpose(2, 0, 1).copy())[None])
    return resize_labels(logits.argmax(dim=1)[0].numpy(), *frame.shape[:2])


@pytest.fixture
def frames() -> list[np.ndarray]:
    rng = np.random.default_rng(3)
    return [rng.integers(0, 256, shape, dtype=np.uint8) for shape in [(48, 64, 3), (48, 64, 3), (30, 40, 3)]]


def test_logits_model_matches_torch_argmax(tmp_path: Path, frames: list[np.ndarray]) -> None:
    module = TinySeg()
    teacher = build_teacher("onnx", model_path=str(export(module, tmp_path / "m.onnx")), mean=MEAN, std=STD,
                            device="cpu")
    assert teacher.class_names == tuple(NAMES)  # from the model's metadata
    results = teacher.label_batch(frames)  # two sizes: two runs
    for frame, labels in zip(frames, results, strict=True):
        assert labels.shape == frame.shape[:2] and labels.dtype == np.uint8
        assert (labels == expected_labels(module, frame)).all()
    assert len(np.unique(results[0])) > 1  # a test that could fail: not one constant class
    info = teacher.describe()
    assert info["backend"] == "onnx" and info["device"] == "cpu" and info["providers"] == [CPU]


def test_labels_model_fixed_size_and_fixed_batch(tmp_path: Path, frames: list[np.ndarray]) -> None:
    module = TinySeg(labels_out=True)
    path = export(module, tmp_path / "fixed.onnx", dynamic=False, size=(24, 32))
    teacher = OnnxTeacher(path, class_names=["a", "b", "c", "d"], mean=MEAN, std=STD, device="cpu")
    assert teacher.input_size == (32, 24) and teacher.class_names == ("a", "b", "c", "d")
    results = teacher.label_batch(frames)  # batch fixed at 1 in the model: run one by one
    logits_module = TinySeg()
    for frame, labels in zip(frames, results, strict=True):
        assert (labels == expected_labels(logits_module, frame, size=(32, 24))).all()
    with pytest.raises(TeacherError, match="fixed 32x24 input, not 64x48"):
        OnnxTeacher(path, class_names=NAMES, input_size="64x48", device="cpu")


def test_bgr_layout_and_dynamic_input_size(tmp_path: Path, frames: list[np.ndarray]) -> None:
    module = TinySeg()
    teacher = OnnxTeacher(export(module, tmp_path / "m.onnx"), channel_order="bgr", scale=1.0, input_size=(32, 24),
                          device="cpu")
    frame = frames[0]
    image = cv2.resize(frame, (32, 24), interpolation=cv2.INTER_LINEAR).astype(np.float32)
    with torch.no_grad():
        logits = module(torch.from_numpy(image.transpose(2, 0, 1).copy())[None])
    assert (teacher.label(frame) == resize_labels(logits.argmax(dim=1)[0].numpy(), 48, 64)).all()


def test_bad_models_and_options(tmp_path: Path, frames: list[np.ndarray]) -> None:
    bare = export(TinySeg(), tmp_path / "bare.onnx", names=None)
    with pytest.raises(TeacherError, match="no 'class_names' metadata"):
        OnnxTeacher(bare, device="cpu")
    wrong = OnnxTeacher(bare, class_names=["background", "person"], device="cpu")
    with pytest.raises(TeacherError, match="4 channels for 2 class names"):
        wrong.label(frames[0])
    few = OnnxTeacher(export(TinySeg(labels_out=True), tmp_path / "l.onnx", names=None), class_names=["a", "b"],
                      device="cpu")
    with pytest.raises(TeacherError, match="labels 0..3 for 2 classes"):
        few.label(frames[0])
    with pytest.raises(TeacherError, match="not found"):
        OnnxTeacher(tmp_path / "absent.onnx")
    (tmp_path / "junk.onnx").write_bytes(b"junk")
    with pytest.raises(TeacherError, match="cannot load"):
        OnnxTeacher(tmp_path / "junk.onnx", class_names=NAMES, device="cpu")
    with pytest.raises(TeacherError, match="three values"):
        OnnxTeacher(bare, class_names=NAMES, mean=(1, 2), device="cpu")
    with pytest.raises(TeacherError, match="no output 'scores'"):
        OnnxTeacher(bare, class_names=NAMES, output_name="scores", device="cpu")


def test_provider_selection() -> None:
    everything = [TENSORRT, CUDA, CPU, "AzureExecutionProvider"]
    assert select_providers("auto", everything) == [TENSORRT, CUDA, CPU]
    assert select_providers("auto", [CPU, CUDA]) == [CUDA, CPU]
    assert select_providers("cuda", everything) == [CUDA, CPU]
    assert select_providers("cpu", everything) == [CPU]
    with pytest.raises(TeacherError, match="needs onnxruntime's TensorrtExecutionProvider"):
        select_providers("tensorrt", [CUDA, CPU])
    with pytest.raises(TeacherError, match="unknown device"):
        select_providers("gpu", everything)
    assert select_providers("cuda:1", everything) == [(CUDA, {"device_id": 1}), CPU]
    for bad in ("cuda:x", "cpu:1", "tensorrt:0"):
        with pytest.raises(TeacherError, match="unknown device"):
            select_providers(bad, everything)
    # The server resolves "auto" to "cuda" with torch: without onnxruntime's CUDA provider the teacher
    # refuses at start and says how to run it on the CPU instead.
    with pytest.raises(TeacherError, match="onnxruntime-gpu.*teacher-options"):
        select_providers("cuda", [CPU])
    assert parse_size("640x360") == (640, 360) and parse_size([32, 24]) == (32, 24)
    with pytest.raises(TeacherError, match="WxH"):
        parse_size("640")
