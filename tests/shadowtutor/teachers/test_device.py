from __future__ import annotations

import pytest
import torch

from shadowtutor.teachers.base import TeacherError
from shadowtutor.teachers.device import resolve_torch_device


def test_auto_and_explicit_devices() -> None:
    assert resolve_torch_device("auto") == ("cuda" if torch.cuda.is_available() else "cpu")
    assert resolve_torch_device("cpu") == "cpu"
    with pytest.raises(TeacherError, match="unknown device 'gpu'"):
        resolve_torch_device("gpu")


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_cuda_without_cuda_is_refused() -> None:
    with pytest.raises(TeacherError, match="CUDA is not available"):
        resolve_torch_device("cuda")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_index_is_checked() -> None:
    assert resolve_torch_device("cuda:0") == "cuda:0"
    with pytest.raises(TeacherError, match="no CUDA device"):
        resolve_torch_device(f"cuda:{torch.cuda.device_count()}")
