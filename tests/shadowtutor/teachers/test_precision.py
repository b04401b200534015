from __future__ import annotations

import pytest
import torch

from shadowtutor.teachers.base import TeacherError
from shadowtutor.teachers.precision import backbone_autocast, check_precision, float32_precision

SWITCHES = (torch.backends.cudnn.conv, torch.backends.cudnn.rnn, torch.backends.cuda.matmul)


def test_tf32_switches_are_set_for_cuda_and_restored() -> None:
    # the switches are process state that PyTorch keeps without a GPU too, so this runs on any machine
    before = [s.fp32_precision for s in SWITCHES]
    with float32_precision("cuda", "fp32"):
        assert [s.fp32_precision for s in SWITCHES] == ["ieee"] * 3
        with float32_precision("cuda:0", "bf16"):
            assert [s.fp32_precision for s in SWITCHES] == ["tf32"] * 3
        assert [s.fp32_precision for s in SWITCHES] == ["ieee"] * 3
    assert [s.fp32_precision for s in SWITCHES] == before
    with pytest.raises(RuntimeError, match="boom"), float32_precision("cuda", "tf32"):
        raise RuntimeError("boom")
    assert [s.fp32_precision for s in SWITCHES] == before
    with float32_precision("cpu", "fp32"):
        assert [s.fp32_precision for s in SWITCHES] == before


def test_bf16_autocast_only_when_asked() -> None:
    conv = torch.nn.Conv2d(3, 4, 3)
    x = torch.rand(1, 3, 8, 8)
    with backbone_autocast("cpu", "bf16"):
        assert conv(x).dtype == torch.bfloat16
    with backbone_autocast("cpu", "tf32"):
        assert conv(x).dtype == torch.float32
    assert check_precision("tf32") == "tf32"
    with pytest.raises(TeacherError, match="precision must be one of"):
        check_precision("half")
