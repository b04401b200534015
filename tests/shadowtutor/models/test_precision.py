from __future__ import annotations

import threading
import time

import pytest
import torch

from shadowtutor.models.precision import (
    bf16_autocast,
    check_precision,
    float32_precision,
    training_float32,
    training_precision,
)

SWITCHES = (torch.backends.cudnn.conv, torch.backends.cudnn.rnn, torch.backends.cuda.matmul)
# the switches are process state that PyTorch keeps without a GPU too, and float32_precision acts on the device's
# type alone, so these tests run on any machine


def switches() -> list[str]:
    return [s.fp32_precision for s in SWITCHES]


def test_tf32_switches_are_set_for_cuda_and_restored() -> None:
    before = switches()
    with float32_precision("cuda", "fp32"):
        assert switches() == ["ieee"] * 3
        with float32_precision("cuda:0", "fp32"):
            assert switches() == ["ieee"] * 3
        assert switches() == ["ieee"] * 3
    assert switches() == before
    with float32_precision("cuda", "bf16"):
        assert switches() == ["tf32"] * 3
    with pytest.raises(RuntimeError, match="boom"), float32_precision("cuda", "tf32"):
        raise RuntimeError("boom")
    assert switches() == before
    with float32_precision("cpu", "fp32"):
        assert switches() == before


def test_a_block_of_the_other_setting_in_the_same_thread_is_refused() -> None:
    before = switches()
    with float32_precision("cuda", "fp32"):
        with pytest.raises(RuntimeError, match="tf32 float32 block inside a ieee block"):
            with float32_precision("cuda", "tf32"):
                pass
        assert switches() == ["ieee"] * 3
    assert switches() == before


class Block(threading.Thread):
    """A thread that enters a float32 block, notes the switches it saw and when, and leaves on ``leave``."""

    def __init__(self, precision: str, timeline: list[tuple[str, str]]) -> None:
        super().__init__(daemon=True)
        self.precision = precision
        self.timeline = timeline
        self.inside = threading.Event()
        self.leave = threading.Event()
        self.seen: list[str] = []

    def run(self) -> None:
        with float32_precision("cuda", self.precision):  # type: ignore[arg-type]
            self.timeline.append(("in", self.name))
            self.seen = switches()
            self.inside.set()
            self.leave.wait(10)
            self.seen += switches()
            self.timeline.append(("out", self.name))


def start(precision: str, timeline: list[tuple[str, str]], name: str) -> Block:
    block = Block(precision, timeline)
    block.name = name
    block.start()
    return block


def test_blocks_of_one_setting_run_together_and_of_two_settings_apart() -> None:
    before = switches()
    timeline: list[tuple[str, str]] = []
    first = start("fp32", timeline, "first")
    assert first.inside.wait(5)
    second = start("fp32", timeline, "second")  # same setting: enters while the first still holds
    assert second.inside.wait(5)
    other = start("tf32", timeline, "other")  # the other setting: waits for both
    time.sleep(0.2)
    assert not other.inside.is_set()
    late = start("fp32", timeline, "late")  # the running setting, after the other began to wait: waits behind it
    time.sleep(0.2)
    assert not late.inside.is_set()
    first.leave.set()
    first.join(5)
    time.sleep(0.1)
    assert not other.inside.is_set()
    second.leave.set()
    assert other.inside.wait(5)
    time.sleep(0.1)
    assert not late.inside.is_set()
    other.leave.set()
    assert late.inside.wait(5)
    late.leave.set()
    for block in (second, other, late):
        block.join(5)
    assert first.seen == second.seen == late.seen == ["ieee"] * 6
    assert other.seen == ["tf32"] * 6
    assert timeline == [("in", "first"), ("in", "second"), ("out", "first"), ("out", "second"),
                        ("in", "other"), ("out", "other"), ("in", "late"), ("out", "late")]
    assert switches() == before


def test_two_settings_take_turns_while_both_want_the_switches() -> None:
    seen: dict[str, set[str]] = {"fp32": set(), "tf32": set()}
    order: list[str] = []
    lock = threading.Lock()

    def work(precision: str) -> None:
        for _ in range(20):
            with float32_precision("cuda", precision):  # type: ignore[arg-type]
                with lock:
                    order.append(precision)
                time.sleep(0.001)
                seen[precision].update(switches())

    threads = [threading.Thread(target=work, args=(p,)) for p in ("fp32", "tf32", "fp32", "tf32")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(20)
    assert seen == {"fp32": {"ieee"}, "tf32": {"tf32"}}  # no block ever saw the other setting's switches
    assert order.count("fp32") == order.count("tf32") == 40


def test_bf16_autocast_only_when_asked() -> None:
    conv = torch.nn.Conv2d(3, 4, 3)
    x = torch.rand(1, 3, 8, 8)
    with bf16_autocast("cpu", "bf16"):
        assert conv(x).dtype == torch.bfloat16
    with bf16_autocast("cpu", "tf32"):
        assert conv(x).dtype == torch.float32
    assert check_precision("tf32") == "tf32"
    with pytest.raises(ValueError, match="precision must be one of"):
        check_precision("half")


def test_auto_training_precision_is_bf16_on_a_cuda_device_with_bfloat16_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    """``torch.cuda.is_bf16_supported`` stands in for a GPU (none here): it is what ``auto`` asks."""
    assert training_precision("auto", "cpu") == "fp32"
    for supported, wanted in ((True, "bf16"), (False, "fp32")):
        monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda supported=supported: supported)
        assert training_precision("auto", "cuda:0") == wanted
    for precision in ("fp32", "tf32", "bf16"):
        assert training_precision(precision, "cpu") == training_precision(precision, "cuda") == precision
    with pytest.raises(ValueError, match="precision must be one of auto, fp32, tf32, bf16, got 'fp16'"):
        training_precision("fp16", "cpu")


def test_bf16_training_holds_the_ieee_float32_switches() -> None:
    assert [training_float32(p) for p in ("fp32", "tf32", "bf16")] == ["fp32", "tf32", "fp32"]
