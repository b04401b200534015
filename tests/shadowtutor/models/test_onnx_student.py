from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from skimage import data

pytest.importorskip("onnxruntime")
onnx = pytest.importorskip("onnx")

from shadowtutor.models.checkpoint import load_student  # noqa: E402
from shadowtutor.models.fast_student import FastStudent, frame_tail_fusable  # noqa: E402
from shadowtutor.models.inference import ReferenceBackend  # noqa: E402
from shadowtutor.models.onnx_student import OnnxBackend, export_fast_student  # noqa: E402
from shadowtutor.models.student import StudentNet  # noqa: E402


@pytest.mark.parametrize("fuse_tail", [True, False])
def test_every_initializer_is_one_fast_student_weight(fuse_tail: bool) -> None:
    # A fresh student has many equal tensors (zero biases); the export must not merge them.
    model = onnx.load_from_string(export_fast_student(9, fuse_tail))
    names = [init.name for init in model.graph.initializer]
    expected = set(FastStudent(StudentNet(9)).state_dict())
    # the head folds out_conv2 and out_conv3; the fused tail folds the head and out_conv1 as well
    folded = ("student.out_conv", "head_") if fuse_tail else ("student.out_conv2.", "student.out_conv3.", "tail_")
    folded_away = {k for k in expected if k.startswith(folded)}
    assert len(names) == len(set(names))
    assert set(names) == expected - folded_away


def test_labels_of_the_authors_student_match_the_reference(peer_student_path: Path) -> None:
    import cv2

    student = load_student(peer_student_path).model
    onnx_backend, reference = OnnxBackend(student, threads=1), ReferenceBackend(student)
    for photo in (data.astronaut(), data.rocket()):
        frame = np.ascontiguousarray(cv2.resize(photo[:, :, ::-1], (320, 240)))
        assert np.mean(onnx_backend.infer(frame) == reference.infer(frame)) >= 0.999


def test_every_frame_size_gets_the_labels_of_its_tail_variant() -> None:
    torch.manual_seed(4)
    student = StudentNet(9).eval()
    backend, reference = OnnxBackend(student, threads=1), ReferenceBackend(student)
    photo = data.astronaut()[:, :, ::-1]
    for height, width in ((48, 64), (75, 133), (180, 320), (100, 150)):
        frame = np.ascontiguousarray(photo[:height, :width])
        labels = backend.infer(frame)
        assert labels.shape == (height, width)
        assert np.mean(labels == reference.infer(frame)) >= 0.999
    assert set(backend._sessions) == {True, False}  # 48x64 and 180x320 fused, the others not


def test_an_update_reaches_the_session() -> None:
    torch.manual_seed(5)
    backend = OnnxBackend(StudentNet(9), threads=1)
    frame = np.ascontiguousarray(data.coffee()[::4, ::4, ::-1])
    winner = torch.zeros(9, 32, 1, 1)
    backend.load_weights({"out_conv3.weight": winner, "out_conv3.bias": torch.arange(9.0)})
    assert (backend.infer(frame) == 8).all()  # the largest bias wins everywhere


class _DisagreeingSession:
    """Stands in for a TensorRT FP16 session whose labels drift (no GPU here to build a real one)."""

    def run(self, _outputs: object, feeds: dict) -> list[np.ndarray]:
        return [np.zeros(feeds["frame"].shape[:2], np.uint8)]


def test_fp16_is_kept_only_where_its_labels_agree_with_fp32(caplog: pytest.LogCaptureFixture) -> None:
    from shadowtutor.models.onnx_student import FP16_MIN_AGREEMENT

    torch.manual_seed(3)
    student = StudentNet(9).eval()
    frame = np.ascontiguousarray(data.coffee()[::4, ::4, ::-1])
    expected = ReferenceBackend(student).infer(frame)
    # The real CPU session as the "FP16" one: its labels agree, so FP16 stays.
    agreeing = OnnxBackend(student, threads=1)
    agreeing.fp16 = agreeing._check_fp16 = True
    assert np.mean(agreeing.infer(frame) == expected) >= 0.999
    assert agreeing.precision == "fp16" and agreeing.fp16_agreement >= FP16_MIN_AGREEMENT
    # A drifting FP16 session: the first frame falls back to FP32 (a rebuilt real session).
    drifting = OnnxBackend(student, threads=1)
    drifting.fp16 = drifting._check_fp16 = True
    drifting._sessions[frame_tail_fusable(*frame.shape[:2])] = _DisagreeingSession()
    with caplog.at_level("WARNING", "shadowtutor.models.onnx_student"):
        assert np.mean(drifting.infer(frame) == expected) >= 0.999
    assert drifting.precision == "fp32" and drifting.fp16_agreement < FP16_MIN_AGREEMENT
    assert "running in FP32" in caplog.text
    assert drifting.infer(frame).shape == expected.shape  # checked once: no second comparison


def test_tensorrt_options_keep_no_engine_but_a_timing_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from shadowtutor.models.onnx_student import provider_options

    monkeypatch.setenv("SHADOWTUTOR_TENSORRT_CACHE", str(tmp_path / "trt"))
    options = provider_options("TensorrtExecutionProvider", fp16=True)
    assert options == {"trt_fp16_enable": "True", "trt_timing_cache_enable": "True",
                       "trt_timing_cache_path": str(tmp_path / "trt")}
    assert (tmp_path / "trt").is_dir() and "trt_engine_cache_enable" not in options
    assert provider_options("CUDAExecutionProvider", fp16=True) == {}
