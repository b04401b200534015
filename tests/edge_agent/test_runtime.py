from __future__ import annotations

import numpy as np
import pytest
import torch

from edge_agent.runtime import StudentRuntime
from shadowtutor.classes import LVS_CLASSES
from shadowtutor.models.backends import (
    STUDENT_BACKENDS,
    BackendUnavailableError,
    onnxruntime_providers,
    resolve_backend,
)
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
    # threshold 0: trust the flow path always
    runtime = StudentRuntime("torch", flow_path=FlowPathConfig(threshold=0.0, max_key_age=2, interval=None))
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
    # auto: the fastest available; on this CPU-only machine with PyPI's onnxruntime that is ONNX
    # Runtime (docs/results/student_bench.md), then the torch graph.
    gpu = torch.cuda.is_available()
    if not gpu and onnx_available():
        assert resolve_backend("auto") == ["onnx", "torch"]
    assert resolve_backend("auto")[-1] == "torch"
    assert set(STUDENT_BACKENDS) == {"auto", "onnx-trt", "onnx-cuda", "cuda", "reference", "torch", "onnx"}
    with pytest.raises(ValueError, match="unknown student backend 'tpu'"):
        resolve_backend("tpu")
    if not gpu:
        with pytest.raises(BackendUnavailableError, match="no CUDA device"):
            resolve_backend("cuda")


@pytest.mark.skipif(not onnx_available(), reason="onnx extra not installed")
@pytest.mark.parametrize(("backend", "provider"), [("onnx-cuda", "CUDAExecutionProvider"),
                                                   ("onnx-trt", "TensorrtExecutionProvider")])
def test_gpu_onnx_backends_say_what_is_missing(backend: str, provider: str) -> None:
    # The real onnxruntime of this (GPU-less) machine: PyPI's CPU build has neither GPU provider.
    if provider in onnxruntime_providers():
        pytest.skip(f"this onnxruntime has {provider}")
    with pytest.raises(BackendUnavailableError, match=f"needs ONNX Runtime's {provider}.*install onnxruntime-gpu"):
        StudentRuntime(backend)


@pytest.mark.skipif(not onnx_available(), reason="onnx extra not installed")
def test_auto_falls_back_when_a_gpu_provider_cannot_start(student: StudentNet, monkeypatch: pytest.MonkeyPatch,
                                                          caplog: pytest.LogCaptureFixture) -> None:
    # No GPU here: auto is made to try onnx-cuda first, as on a machine whose onnxruntime-gpu lists
    # the CUDA provider but cannot start it (no device, missing libraries). The real ONNX Runtime
    # then runs the session on the CPU instead, which the backend notices and refuses.
    monkeypatch.setattr("shadowtutor.models.backends.AUTO_ORDER", ("onnx-cuda", "onnx", "torch"))
    monkeypatch.setattr("shadowtutor.models.backends.unavailable_reason", lambda kind: None)
    runtime = StudentRuntime("auto")
    assert runtime.backend_kind == "onnx-cuda"
    with caplog.at_level("WARNING", "edge_agent.runtime"):
        runtime.load(student.state_dict(), LVS_CLASSES)
    assert runtime.backend_kind == "onnx" and (runtime.infer(frame()) == plain_labels(student)).mean() > 0.999
    assert "could not start CUDAExecutionProvider" in caplog.text
    assert "falling back to student backend 'onnx'" in caplog.text
    named = StudentRuntime("onnx-cuda")  # a named backend does not fall back
    with pytest.raises(BackendUnavailableError, match="could not start CUDAExecutionProvider"):
        named.load(student.state_dict(), LVS_CLASSES)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_backend_matches_the_plain_student(student: StudentNet) -> None:
    runtime = StudentRuntime("cuda")
    runtime.load(student.state_dict(), LVS_CLASSES)
    assert (runtime.infer(frame()) == plain_labels(student)).mean() > 0.999
    runtime.update({"out_conv3.bias": torch.arange(9, dtype=torch.float32) * 100})
    assert (runtime.infer(frame()) == 8).all()


def test_change_based_student_labels_as_its_backend_and_follows_updates(student: StudentNet) -> None:
    from shadowtutor.acceleration.change_based.backend import ChangeBasedOptions

    exact = ChangeBasedOptions(scale=0.0)  # thresholds 0: the same labels as full-frame inference
    runtime = StudentRuntime("torch", change_based=exact)
    plain = StudentRuntime("torch")
    for r in (runtime, plain):
        r.load(student.state_dict(), LVS_CLASSES)
    assert runtime.backend_kind == "torch+change-based" and plain.change_stats is None
    frames = [frame(), frame().copy()]
    frames[1][5:15, 5:20] = 255
    for f in frames:
        assert np.array_equal(runtime.infer(f), plain.infer(f))
    assert runtime.change_stats.mode == "change"
    update = {k: v + 0.1 for k, v in student.state_dict().items() if k.startswith("dec3.")}
    for r in (runtime, plain):
        r.update(update)
    assert np.array_equal(runtime.infer(frames[0]), plain.infer(frames[0]))


def test_change_based_backend_choice() -> None:
    assert resolve_backend("auto", change_based=True)[0] == ("onnx" if onnx_available() else "torch")
    with pytest.raises(ValueError, match="onnx or torch backend, not cuda"):
        resolve_backend("cuda", change_based=True)


def test_a_student_size_runs_the_student_on_the_resized_frame_with_labels_at_the_frames_size(
    student: StudentNet,
) -> None:
    from shadowtutor.acceleration.regions.labeller import FlowPathConfig
    from shadowtutor.models.scale import frame_to_student, labels_to_frame

    image = np.random.default_rng(1).integers(0, 255, (96, 128, 3), dtype=np.uint8)
    runtime = StudentRuntime("reference")
    runtime.load(student.state_dict(), LVS_CLASSES)
    runtime.set_student_size((64, 48))
    labels = runtime.infer(image)
    with torch.no_grad():
        small = student(normalise_frame(frame_to_student(image, (64, 48)))).argmax(1)[0].to(torch.uint8).numpy()
    assert labels.shape == (96, 128) and np.array_equal(labels, labels_to_frame(small, image.shape))
    runtime.set_student_size(None)
    assert (runtime.infer(frame()) == plain_labels(student)).mean() > 0.999
    with pytest.raises(ValueError, match="flow path"):
        StudentRuntime("torch", flow_path=FlowPathConfig()).set_student_size((64, 48))
