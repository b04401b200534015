from __future__ import annotations

import numpy as np
import pytest
import torch
from skimage import data

from shadowtutor.models.backends import CPU_BACKENDS
from shadowtutor.models.inference import build_inference_backend, check_frame, onnx_available
from shadowtutor.models.student import StudentNet

needs_onnx = pytest.mark.skipif(not onnx_available(), reason="onnx / onnxruntime are not installed")
KINDS = [pytest.param(k, marks=needs_onnx) if k == "onnx" else k for k in CPU_BACKENDS]


def _frames() -> list[np.ndarray]:
    import cv2

    photos = (data.astronaut(), data.chelsea(), data.coffee())
    return [np.ascontiguousarray(cv2.resize(p[:, :, ::-1], (120, 72))) for p in photos]


@pytest.mark.parametrize("kind", KINDS)
def test_backends_label_like_the_reference_before_and_after_an_update(kind: str) -> None:
    torch.manual_seed(4)
    student = StudentNet(9)
    reference = build_inference_backend("reference", student)
    backend = build_inference_backend(kind, student, threads=1)
    assert backend.kind == kind
    frames = _frames()
    for frame in frames:
        labels = backend.infer(frame)
        assert labels.shape == frame.shape[:2] and labels.dtype == np.uint8
        assert np.mean(labels == reference.infer(frame)) >= 0.99
    trained = StudentNet(9)
    update = {k: v for k, v in trained.state_dict().items() if k in trained.trainable_keys("partial")}
    before = backend.infer(frames[0])
    backend.apply(update)
    reference.load_weights(update)
    after = backend.infer(frames[0])
    assert not np.array_equal(before, after)
    assert np.mean(after == reference.infer(frames[0])) >= 0.99


def test_a_backend_holds_its_own_copy_of_the_student() -> None:
    student = StudentNet(9)
    backend = build_inference_backend("torch", student)
    frame = _frames()[0]
    before = backend.infer(frame)
    with torch.no_grad():
        student.out_conv3.bias.add_(100.0 * torch.arange(9.0))
    assert np.array_equal(backend.infer(frame), before)


def test_bad_input_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown inference backend"):
        build_inference_backend("tensorrt", StudentNet(9))
    with pytest.raises(ValueError, match="BGR uint8"):
        check_frame(np.zeros((8, 8), np.uint8))
    with pytest.raises(ValueError, match="BGR uint8"):
        check_frame(np.zeros((8, 8, 3), np.float32))
