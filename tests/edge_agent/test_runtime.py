from __future__ import annotations

import numpy as np
import pytest
import torch

from edge_agent.runtime import TorchStudentRuntime, resolve_device
from shadowtutor.classes import LVS_CLASSES
from shadowtutor.models.checkpoint import CheckpointError
from shadowtutor.models.student import StudentNet, normalise_frame


@pytest.fixture
def student() -> StudentNet:
    torch.manual_seed(0)
    return StudentNet(len(LVS_CLASSES)).eval()


def frame() -> np.ndarray:
    return np.random.default_rng(0).integers(0, 255, (40, 56, 3), dtype=np.uint8)


def test_starts_empty_and_says_so() -> None:
    runtime = TorchStudentRuntime("cpu")
    assert not runtime.loaded
    with pytest.raises(RuntimeError, match="no weights yet"):
        runtime.infer(frame())


def test_labels_match_the_plain_student(student: StudentNet) -> None:
    runtime = TorchStudentRuntime("cpu")
    runtime.load(student.state_dict(), LVS_CLASSES)
    labels = runtime.infer(frame())
    with torch.no_grad():
        expected = student(normalise_frame(frame())).argmax(1)[0].numpy()
    assert labels.dtype == np.uint8 and labels.shape == (40, 56)
    np.testing.assert_array_equal(labels, expected)


def test_partial_update_overwrites_only_the_named_tensors(student: StudentNet) -> None:
    runtime = TorchStudentRuntime("cpu")
    runtime.load(student.state_dict(), LVS_CLASSES)
    runtime.update({"out_conv3.bias": torch.arange(9, dtype=torch.float32) * 100})
    state = runtime.model.state_dict()
    assert torch.equal(state["out_conv3.bias"], torch.arange(9, dtype=torch.float32) * 100)
    assert torch.equal(state["in_conv1.weight"], student.state_dict()["in_conv1.weight"])
    assert (runtime.infer(frame()) == 8).all()  # the largest bias wins everywhere


def test_bad_weights_are_rejected(student: StudentNet) -> None:
    runtime = TorchStudentRuntime("cpu")
    with pytest.raises(CheckpointError, match="missing"):
        runtime.load({k: v for k, v in student.state_dict().items() if k != "dec2.long_path.0.weight"}, LVS_CLASSES)
    runtime.load(student.state_dict(), LVS_CLASSES)
    with pytest.raises(ValueError, match="does not have"):
        runtime.update({"head.weight": torch.zeros(1)})
    with pytest.raises(RuntimeError, match="size mismatch"):
        runtime.update({"out_conv3.bias": torch.zeros(3)})


def test_auto_device_falls_back_to_the_cpu() -> None:
    assert resolve_device("auto").type == ("cuda" if torch.cuda.is_available() else "cpu")
