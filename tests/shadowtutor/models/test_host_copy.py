"""Tensors to host memory: host tensors as they are, CUDA ones as page-locked copies of their values."""

from __future__ import annotations

import pytest
import torch

from shadowtutor.models.host_copy import to_host


def test_host_tensors_come_back_as_they_are() -> None:
    tensors = [torch.arange(6).view(2, 3), torch.ones(4, dtype=torch.float64)]
    copies = to_host(tensors)
    assert [c is t for c, t in zip(copies, tensors, strict=True)] == [True, True]
    assert to_host([]) == []


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_tensors_come_back_as_page_locked_copies() -> None:
    tensors = [torch.arange(6, device="cuda").view(2, 3), torch.rand(3, 4, dtype=torch.float64, device="cuda")]
    copies = to_host(tensors)
    for copy, tensor in zip(copies, tensors, strict=True):
        assert copy.device.type == "cpu" and copy.is_pinned() and copy.dtype == tensor.dtype
        assert torch.equal(copy, tensor.cpu())
