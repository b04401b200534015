from __future__ import annotations

import numpy as np
import pytest
import torch

from edge_agent.runtime import BACKENDS, StudentRuntime, resolve_backend
from shadowtutor.classes import LVS_CLASSES
from shadowtutor.models.checkpoint import CheckpointError
from shadowtutor.models.fast_student import WeightUpdateError
from shadowtutor.models.inference import onnx_available
from shadowtutor.models.student import StudentNet, normalise_frame

CPU_BACKENDS = [
    "reference",
    "torch",
    pytest.param("onnx", marks=pytest.mark.skipif(not onnx_available(), reason="onnx extra not installed")),
]


@pytest.fixture
def student() -> StudentNet:
    torch.manual_seed(0)
    return StudentNet(len(LVS_CLASSES)).eval()


def frame() -> np.ndarray:
    return np.random.default_rng(0).integers(0, 255, (40, 56, 3), dtype=np.uint8)


def plain_labels(student: StudentNet) -> np.ndarray:
    with torch.no_grad():
        return student(normalise_frame(frame())).argmax(1)[0].numpy()


def test_starts_empty_and_says_so() -> None:
    runtime = StudentRuntime("reference")
    assert not runtime.loaded
    with pytest.raises(RuntimeError, match="no weights yet"):
        runtime.infer(frame())


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_labels_match_the_plain_student(student: StudentNet, backend: str) -> None:
    runtime = StudentRuntime(backend)
    runtime.load(student.state_dict(), LVS_CLASSES)
    labels = runtime.infer(frame())
    assert labels.dtype == np.uint8 and labels.shape == (40, 56)
    assert (labels == plain_labels(student)).mean() > 0.999  # the same up to float rounding


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_partial_update_changes_the_labels_as_in_the_plain_student(student: StudentNet, backend: str) -> None:
    runtime = StudentRuntime(backend)
    runtime.load(student.state_dict(), LVS_CLASSES)
    update = {"out_conv3.bias": torch.arange(9, dtype=torch.float32) * 100}
    runtime.update(update)
    assert (runtime.infer(frame()) == 8).all()  # the largest bias wins everywhere
    student.load_state_dict(update, strict=False)
    runtime.update({"out_conv3.bias": torch.zeros(9)})
    student.load_state_dict({"out_conv3.bias": torch.zeros(9)}, strict=False)
    assert (runtime.infer(frame()) == plain_labels(student)).mean() > 0.999


def test_flow_path_warps_between_segmentations_and_refreshes_keys_after_updates(student: StudentNet) -> None:
    from shadowtutor.acceleration.regions.labeller import FlowPathConfig
    from tests.support.motion import panning

    plain = StudentRuntime("torch")
    plain.load(student.state_dict(), LVS_CLASSES)
    runtime = StudentRuntime("torch", FlowPathConfig(threshold=0.0, max_key_age=2))  # trust the flow path always
    runtime.load(student.state_dict(), LVS_CLASSES)
    frames = panning(5, size=(96, 64))
    paths = []
    for f in frames[:4]:
        labels = runtime.infer(f)
        paths.append(runtime.last_regions.paths[0])
        if paths[-1] == "segment":
            assert (labels == plain.infer(f)).all()  # the segmentation path is the student on the whole frame
    assert paths == ["segment", "flow", "flow", "segment"]  # the key age bound
    runtime.update({"out_conv3.bias": torch.arange(9, dtype=torch.float32) * 100})
    assert (runtime.infer(frames[4]) == 8).all()  # the new student's labels at once, nothing warped from the old
    assert runtime.last_regions.paths == ("segment",) * 4
    assert plain.last_regions is None


def test_bad_weights_are_rejected(student: StudentNet) -> None:
    runtime = StudentRuntime("reference")
    with pytest.raises(CheckpointError, match="missing"):
        runtime.load({k: v for k, v in student.state_dict().items() if k != "dec2.long_path.0.weight"}, LVS_CLASSES)
    runtime.load(student.state_dict(), LVS_CLASSES)
    with pytest.raises(WeightUpdateError, match="does not have"):
        runtime.update({"head.weight": torch.zeros(1)})
    with pytest.raises(WeightUpdateError, match="shape"):
        runtime.update({"out_conv3.bias": torch.zeros(3)})


def test_backend_choice() -> None:
    assert resolve_backend("auto") == ("cuda" if torch.cuda.is_available() else "torch")
    assert set(BACKENDS) == {"auto", "cuda", "reference", "torch", "onnx"}
    with pytest.raises(ValueError, match="unknown student backend 'tpu'"):
        resolve_backend("tpu")
    if not torch.cuda.is_available():
        with pytest.raises(RuntimeError, match="no CUDA device"):
            resolve_backend("cuda")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_backend_matches_the_plain_student(student: StudentNet) -> None:
    runtime = StudentRuntime("cuda")
    runtime.load(student.state_dict(), LVS_CLASSES)
    assert (runtime.infer(frame()) == plain_labels(student)).mean() > 0.999
    runtime.update({"out_conv3.bias": torch.arange(9, dtype=torch.float32) * 100})
    assert (runtime.infer(frame()) == 8).all()
