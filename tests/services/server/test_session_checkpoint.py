"""A session rebuilt from its checkpoint goes on exactly as the original would (real distillation, real codecs)."""

from __future__ import annotations

import pytest
import torch

from services.server.session import EdgeSession, Traffic
from services.server.session_checkpoint import CheckpointFormatError, header, restore, snapshot
from shadowtutor.algorithms.distill import Distiller
from shadowtutor.algorithms.params import AlgorithmParams
from shadowtutor.models.student import StudentNet
from shadowtutor.protocol.messages import Hello, encode
from tests.support.scene import CLASS_NAMES, make_frames

PARAMS = AlgorithmParams(max_updates=2, threshold=0.99, learning_rate=0.05)


def new_distiller(student_size: tuple[int, int] | None) -> Distiller:
    torch.manual_seed(0)  # the base student: the same weights in every "process"
    return Distiller(StudentNet(3), PARAMS, background=2, student_size=student_size)


def original() -> EdgeSession:
    hello = Hello(edge_id="cam", class_names=list(CLASS_NAMES), frame_width=64, frame_height=48, token="secret")
    return EdgeSession(hello, "raw", "f16+zstd", PARAMS, Traffic(), new_distiller((64, 48)),
                       delta_codec="q8delta+zstd")


def test_a_restored_session_sends_the_updates_the_original_would_have() -> None:
    frames, labels = make_frames(4)
    session = original()
    session.welcome()
    for seq in range(2):
        update = session.distill(seq, frames[seq], labels[seq], base_version=seq, teacher_ms=1.0)
    data = snapshot(session, update, reply_seq=1)
    assert b"secret" not in data  # the token stays out of shared storage
    restored = restore(data, PARAMS, new_distiller)
    copy = restored.session
    assert (copy.session_id, copy.version, copy.distiller.student_size) == (session.session_id, 2, (64, 48))
    assert (restored.reply_seq, encode(restored.reply)) == (1, encode(update))
    assert header(data)["version"] == 2 and header(data)["writer"] == restored.writer
    sent = []
    for seq in range(2, 4):
        a = session.distill(seq, frames[seq], labels[seq], base_version=seq, teacher_ms=1.0)
        b = copy.distill(seq, frames[seq], labels[seq], base_version=seq, teacher_ms=1.0)
        assert (a.version, a.full, a.tensors, a.payload) == (b.version, b.full, b.tensors, b.payload)
        assert not a.full
        sent += a.tensors
    assert sent  # partial deltas against the held weights: the mirror came along
    for name, tensor in session.distiller.student.state_dict().items():
        torch.testing.assert_close(copy.distiller.student.state_dict()[name], tensor, rtol=0, atol=0)


def test_a_checkpoint_from_the_results_host_copies_equals_one_read_from_the_student(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The checkpoint of an answer is taken from the host copies its training left (on a GPU, reading the
    student would wait behind the next batch); it restores the same session as one read from the student."""
    frames, labels = make_frames(2)
    session = original()
    session.welcome()
    for seq in range(2):
        result = session.distiller.train(frames[seq], labels[seq])
        update = session.trained(seq, result, 0.1, base_version=seq, teacher_ms=1.0)
    read = restore(snapshot(session, update, reply_seq=1), PARAMS, new_distiller).session

    def unread(*args: object, **kwargs: object) -> None:
        raise AssertionError("the student or its optimiser was read")

    monkeypatch.setattr(session.distiller.student, "state_dict", unread)
    monkeypatch.setattr(session.distiller.optimizer, "state_dict", unread)
    copied = restore(snapshot(session, update, reply_seq=1, trained=result), PARAMS, new_distiller).session
    for name, tensor in read.distiller.student.state_dict().items():
        torch.testing.assert_close(copied.distiller.student.state_dict()[name], tensor, rtol=0, atol=0)
    want, got = read.distiller.optimizer.state_dict(), copied.distiller.optimizer.state_dict()
    assert want["param_groups"] == got["param_groups"] and want["state"].keys() == got["state"].keys()
    for index, entry in want["state"].items():
        for name, tensor in entry.items():
            torch.testing.assert_close(got["state"][index][name], tensor, rtol=0, atol=0)


def test_bytes_that_are_not_a_checkpoint_are_refused() -> None:
    with pytest.raises(CheckpointFormatError, match="not a session checkpoint"):
        restore(b"not a checkpoint", PARAMS, new_distiller)
    with pytest.raises(CheckpointFormatError, match="not a session checkpoint"):
        header(b"")


def test_a_naive_session_has_nothing_to_checkpoint() -> None:
    hello = Hello(edge_id="cam", class_names=list(CLASS_NAMES), frame_width=64, frame_height=48, mode="naive")
    with pytest.raises(ValueError, match="naive"):
        snapshot(EdgeSession(hello, "raw", "f32", PARAMS, Traffic(), None))
