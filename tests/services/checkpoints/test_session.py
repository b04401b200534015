"""A session rebuilt from its checkpoint goes on exactly as the original would (real distillation, real codecs)."""

from __future__ import annotations

import copy
import io
import zipfile
from collections.abc import Callable

import pytest
import torch
import zstandard

from services.checkpoints.checks import MAX_CHECKPOINT_BYTES
from services.checkpoints.pack import archive, unarchive
from services.checkpoints.session import CheckpointFormatError, header, restore, snapshot
from services.server.teaching.session import EdgeSession, Traffic
from shadowtutor.algorithms.distill import Distiller
from shadowtutor.algorithms.params import AlgorithmParams
from shadowtutor.algorithms.sparse_options import SparseOptions
from shadowtutor.algorithms.update_policy import UpdatePolicy
from shadowtutor.models.student import StudentNet
from shadowtutor.protocol.agreement import Agreement
from shadowtutor.protocol.codecs import decode_tensors
from shadowtutor.protocol.messages import Hello, Update, encode
from shadowtutor.protocol.sparse_delta import decode_sparse, is_sparse_codec
from shadowtutor.protocol.weight_sync import HeldWeights
from tests.support.scene import CLASS_NAMES, make_frames
from tests.support.sessions import distill

PARAMS = AlgorithmParams(max_updates=2, threshold=0.99, learning_rate=0.05)
BOUND = (1920, 1080)


def new_distiller(student_size: tuple[int, int] | None) -> Distiller:
    torch.manual_seed(0)  # the base student: the same weights in every "process"
    return Distiller(StudentNet(3), PARAMS, background=2, student_size=student_size)


def original() -> EdgeSession:
    hello = Hello(edge_id="cam", class_names=list(CLASS_NAMES), frame_width=64, frame_height=48, token="secret")
    return EdgeSession(
        hello=hello,
        agreement=Agreement(frame_codec="raw", weight_codec="f16+zstd", delta_codec="q8delta+zstd"),
        params=PARAMS,
        traffic=Traffic(),
        distiller=new_distiller((64, 48)),
    )


def test_a_restored_session_sends_the_updates_the_original_would_have() -> None:
    frames, labels = make_frames(4)
    session = original()
    session.welcome()
    for seq in range(2):
        update = distill(session, seq, frames[seq], labels[seq], base_version=seq, teacher_ms=1.0)
    data = snapshot(session, update, reply_seq=1)
    assert b"secret" not in data  # the token stays out of shared storage
    restored = restore(data, PARAMS, new_distiller, edge_id="cam", session_id=session.session_id, max_size=BOUND)
    copy = restored.session
    assert (copy.session_id, copy.version, copy.distiller.student_size) == (session.session_id, 2, (64, 48))
    assert (restored.reply_seq, encode(restored.reply)) == (1, encode(update))
    assert header(data)["version"] == 2 and header(data)["writer"] == restored.writer
    sent = []
    for seq in range(2, 4):
        a = distill(session, seq, frames[seq], labels[seq], base_version=seq, teacher_ms=1.0)
        b = distill(copy, seq, frames[seq], labels[seq], base_version=seq, teacher_ms=1.0)
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
    slot = {"edge_id": "cam", "session_id": session.session_id, "max_size": BOUND}
    read = restore(snapshot(session, update, reply_seq=1), PARAMS, new_distiller, **slot).session

    def unread(*args: object, **kwargs: object) -> None:
        raise AssertionError("the student or its optimiser was read")

    monkeypatch.setattr(session.distiller.student, "state_dict", unread)
    monkeypatch.setattr(session.distiller.optimizer, "state_dict", unread)
    copied = restore(snapshot(session, update, reply_seq=1, trained=result), PARAMS, new_distiller, **slot).session
    for name, tensor in read.distiller.student.state_dict().items():
        torch.testing.assert_close(copied.distiller.student.state_dict()[name], tensor, rtol=0, atol=0)
    want, got = read.distiller.optimizer.state_dict(), copied.distiller.optimizer.state_dict()
    assert want["param_groups"] == got["param_groups"] and want["state"].keys() == got["state"].keys()
    for index, entry in want["state"].items():
        for name, tensor in entry.items():
            torch.testing.assert_close(got["state"][index][name], tensor, rtol=0, atol=0)


def test_bytes_that_are_not_a_checkpoint_are_refused() -> None:
    with pytest.raises(CheckpointFormatError, match="not a session checkpoint"):
        restore(b"not a checkpoint", PARAMS, new_distiller, edge_id="cam", session_id="s", max_size=BOUND)
    with pytest.raises(CheckpointFormatError, match="not a session checkpoint"):
        header(b"")


def test_a_naive_session_has_nothing_to_checkpoint() -> None:
    hello = Hello(edge_id="cam", class_names=list(CLASS_NAMES), frame_width=64, frame_height=48, mode="naive")
    with pytest.raises(ValueError, match="naive"):
        snapshot(EdgeSession(
            hello=hello,
            agreement=Agreement(frame_codec="raw", weight_codec="f32"),
            params=PARAMS,
            traffic=Traffic(),
            distiller=None,
        ))


def _checkpoint() -> tuple[EdgeSession, dict]:
    """A distilled session and its checkpoint's record (to tamper with)."""
    frames, labels = make_frames(1)
    session = original()
    session.welcome()
    update = distill(session, 0, frames[0], labels[0], base_version=0, teacher_ms=1.0)
    return session, unarchive(snapshot(session, update, reply_seq=0))


def _saved(record: dict) -> bytes:
    return archive(record)


def _tampered(record: dict, key: str, change: object) -> dict:
    changed = copy.deepcopy(record)
    if callable(change):
        change(changed)
    else:
        changed[key] = change
    return changed


def _first_state(record: dict) -> dict:
    return next(iter(record["optimizer"]["state"].values()))


TAMPERINGS = {
    "another edge's hello": ("hello", encode(Hello(edge_id="cam-2", class_names=list(CLASS_NAMES), frame_width=64,
                                                   frame_height=48)), "not session"),
    "another session": ("session_id", "someone-else", "not session"),
    "no weights": ("weights", {}, "keys differ"),
    "a wrong shape": ("weights", lambda r: r["weights"].update(
        {k: torch.zeros(3) for k in list(r["weights"])[:1]}), "the student's is"),
    "an unknown weight": ("weights", lambda r: r["weights"].update({"extra.weight": torch.zeros(1)}), "unknown"),
    "a string version": ("version", "7", "'version' is str"),
    "a bool version": ("version", True, "'version' is bool"),
    "a huge student size": ("student_size", [20000, 20000], "student_size"),
    "a bad optimiser state": ("optimizer", lambda r: _first_state(r).update(exp_avg=torch.zeros(2, 2)),
                              "optimizer"),
    "an optimiser without groups": ("optimizer", {"state": {}}, "optimizer"),
    "a string optimiser step": ("optimizer", lambda r: _first_state(r).update(step="1"), "not a tensor"),
    "a bad mirror": ("mirror", {"held": {}}, "mirror"),
    "an unknown codec": ("frame_codec", "gif", "codecs"),
    "a format from elsewhere": ("format", 3, "format"),
    "a reply that is no message": ("reply", b"junk", "reply"),
    "not a record": ("", lambda r: r.clear(), "'format'"),
}


@pytest.mark.parametrize("case", list(TAMPERINGS))
def test_a_tampered_checkpoint_is_refused_in_one_line(case: str) -> None:
    session, record = _checkpoint()
    key, change, reason = TAMPERINGS[case]
    data = _saved(_tampered(record, key, change))
    with pytest.raises(CheckpointFormatError, match=reason) as refused:
        restore(data, PARAMS, new_distiller, edge_id="cam", session_id=session.session_id, max_size=BOUND)
    assert "\n" not in str(refused.value)


def test_a_checkpoint_is_restored_only_into_its_own_edges_slot() -> None:
    session, record = _checkpoint()
    data = _saved(record)
    with pytest.raises(CheckpointFormatError, match="of edge 'cam', not session"):
        restore(data, PARAMS, new_distiller, edge_id="cam-1", session_id=session.session_id, max_size=BOUND)


def test_a_checkpoint_that_inflates_past_the_bound_is_refused_unread() -> None:
    bomb = zstandard.ZstdCompressor().compress(b"\0" * (MAX_CHECKPOINT_BYTES + 1))
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as inner:
        inner.writestr("archive/data/0", b"\0" * (MAX_CHECKPOINT_BYTES + 1))
    zip_bomb = zstandard.ZstdCompressor().compress(buffer.getvalue())
    for data in (bomb, zip_bomb):
        assert len(data) < MAX_CHECKPOINT_BYTES // 100
        with pytest.raises(CheckpointFormatError, match="inflates"):
            restore(data, PARAMS, new_distiller, edge_id="cam", session_id="s", max_size=BOUND)


def test_a_checkpoint_of_the_earlier_format_is_refused_in_one_line() -> None:
    session, record = _checkpoint()
    buffer = io.BytesIO()
    torch.save({**record, "format": 1}, buffer)
    with pytest.raises(CheckpointFormatError, match="earlier release") as refused:
        restore(buffer.getvalue(), PARAMS, new_distiller, edge_id="cam", session_id=session.session_id,
                max_size=BOUND)
    assert "\n" not in str(refused.value)


def sparse_session(every: int) -> EdgeSession:
    hello = Hello(edge_id="cam", class_names=list(CLASS_NAMES), frame_width=64, frame_height=48)
    return EdgeSession(
        hello=hello,
        agreement=Agreement(frame_codec="raw", weight_codec="f32", delta_codec="q4sparse+zstd"),
        params=PARAMS,
        traffic=Traffic(),
        distiller=new_distiller((64, 48)),
        sparse=SparseOptions(fraction=0.02, every=every, choice="gradient"),
    )


def edge_installs(edge: HeldWeights, update: Update, codec: str) -> None:
    """What the edge agent does with an UPDATE (edge_agent.versioning): full weights replace, sparse or dense deltas
    add."""
    if update.full:
        edge.replace(decode_tensors(update.tensors, update.payload, "f32"))
    elif is_sparse_codec(codec):
        edge.apply_sparse(decode_sparse(update.tensors, update.payload, codec, edge.coordinates))
    else:
        edge.apply(decode_tensors(update.tensors, update.payload, codec), delta=True)


def test_sparse_updates_keep_the_edge_bit_identical_through_resyncs_reconnects_and_a_takeover() -> None:
    frames, labels = make_frames(12)
    session, edge = sparse_session(every=2), HeldWeights()
    welcome = session.welcome()
    edge.replace(decode_tensors(welcome.tensors, welcome.payload, "f32"))
    trainable = session.distiller.trainable_keys
    chosen_counts, carried = set(), 0
    for seq in range(12):
        if seq == 4:
            # a resync: full weights, after which the set travels again
            edge_installs(edge, session.resync(session.version), "q4sparse+zstd")
        if seq == 6:
            # a takeover: another process restores the session from its checkpoint
            session = restore(snapshot(session), PARAMS, new_distiller, edge_id="cam",
                              session_id=session.session_id, max_size=BOUND).session
        if seq == 9:
            # a reconnect: a new WELCOME with full weights on the same session's student
            welcome = session.welcome()
            edge.replace(decode_tensors(welcome.tensors, welcome.payload, "f32"))
        before = {key: edge.state[key].clone() for key in trainable}
        update = distill(session, seq, frames[seq], labels[seq], base_version=session.version, teacher_ms=1.0)
        edge_installs(edge, update, "q4sparse+zstd")
        carried += bool(update.tensors)
        for key, value in session.encoder.held.state.items():
            assert torch.equal(edge.state[key], value), (seq, key)
        moved = sum(int((edge.state[key] != before[key]).sum()) for key in trainable)
        coordinates = session.distiller.chooser.coordinates
        assert coordinates is not None and moved <= coordinates.size
        chosen_counts.add(coordinates.size)
    total = sum(session.distiller.student.state_dict()[key].numel() for key in trainable)
    assert chosen_counts == {round(0.02 * total)}
    # the set travelled at the first update, after the resync and the reconnect, and when chosen again
    assert 3 <= carried < 12


def test_residual_sparse_updates_keep_the_edge_bit_identical_through_resyncs_reconnects_and_a_takeover() -> None:
    """The server trains every coordinate and each update carries the share furthest from the edge's weights."""
    frames, labels = make_frames(10)
    options = SparseOptions(fraction=0.05, choice="residual")
    hello = Hello(edge_id="cam", class_names=list(CLASS_NAMES), frame_width=64, frame_height=48)
    session = EdgeSession(hello=hello, params=PARAMS, traffic=Traffic(), distiller=new_distiller((64, 48)),
                          agreement=Agreement(frame_codec="raw", weight_codec="f32", delta_codec="q4sparse+zstd"),
                          sparse=options)
    assert session.distiller.chooser is None  # nothing is masked: the whole back trains
    edge = HeldWeights()
    welcome = session.welcome()
    edge.replace(decode_tensors(welcome.tensors, welcome.payload, "f32"))
    trainable = session.distiller.trainable_keys
    total = sum(session.distiller.student.state_dict()[key].numel() for key in trainable)
    carried = 0
    for seq in range(10):
        if seq == 3:
            edge_installs(edge, session.resync(session.version), "q4sparse+zstd")
        if seq == 5:
            session = restore(snapshot(session), PARAMS, new_distiller, edge_id="cam",
                              session_id=session.session_id, max_size=BOUND).session
            assert session.sparse == options and session.distiller.chooser is None
        if seq == 8:
            welcome = session.welcome()
            edge.replace(decode_tensors(welcome.tensors, welcome.payload, "f32"))
        before = {key: edge.state[key].clone() for key in trainable}
        update = distill(session, seq, frames[seq], labels[seq], base_version=session.version, teacher_ms=1.0)
        edge_installs(edge, update, "q4sparse+zstd")
        for key, value in session.encoder.held.state.items():
            assert torch.equal(edge.state[key], value), (seq, key)
        moved = sum(int((edge.state[key] != before[key]).sum()) for key in trainable)
        assert moved <= round(0.05 * total), seq
        carried += moved > 0
    assert carried >= 3  # key frames whose training Algorithm 1 kept (it rolls back the others)
    trained = session.distiller.student.state_dict()
    # the server's own weights moved beyond what the edge holds: the rest waits for later updates
    assert any(not torch.equal(trained[key].cpu(), edge.state[key]) for key in trainable)


def test_a_sparse_checkpoint_with_a_tampered_set_or_chooser_is_refused() -> None:
    frames, labels = make_frames(2)
    session = sparse_session(every=2)
    session.welcome()
    for seq in range(2):
        distill(session, seq, frames[seq], labels[seq], base_version=session.version, teacher_ms=1.0)
    record = unarchive(snapshot(session))

    def refused(change: Callable[[dict], None], match: str) -> None:
        tampered = copy.deepcopy(record)
        change(tampered)
        with pytest.raises(CheckpointFormatError, match=match):
            restore(archive(tampered), PARAMS, new_distiller, edge_id="cam", session_id=session.session_id,
                    max_size=BOUND)

    first = next(iter(record["mirror"]["coordinates"]["indices"]))
    refused(lambda r: r["mirror"]["coordinates"]["indices"].__setitem__(first, torch.tensor([10**9])),
            "ascending")
    refused(lambda r: r["mirror"]["coordinates"].__setitem__("set_id", -1), "set id")
    refused(lambda r: r["sparse"].__setitem__("fraction", 7.0), "fraction")
    refused(lambda r: r["sparse"]["chooser"]["accumulated"].popitem(), "sparse accumulated")
    refused(lambda r: r["sparse"].__setitem__("choice", "largest"), "choice")
    refused(lambda r: r["sparse"].__setitem__("chooser", None), "chooser")  # a set trained, its chooser lost


@pytest.mark.parametrize("codec", ["q8delta+zstd", "q4sparse+zstd"])
def test_gated_updates_keep_the_edge_bit_identical_through_held_back_merged_resyncs_reconnects_and_a_takeover(
    codec: str,
) -> None:
    """Held-back answers change nothing on the edge; the next update carries the training they held back (the
    delta is against the edge's weights); resyncs, a reconnect and a takeover keep both copies equal."""
    frames, labels = make_frames(12)
    policy = UpdatePolicy(gated=True, min_gain=1.0, max_interval=3)
    hello = Hello(edge_id="cam", class_names=list(CLASS_NAMES), frame_width=64, frame_height=48, update_gating=True)
    session = EdgeSession(hello=hello, agreement=Agreement(frame_codec="raw", weight_codec="f32", delta_codec=codec),
                          params=PARAMS, traffic=Traffic(), distiller=new_distiller((64, 48)),
                          sparse=SparseOptions(fraction=0.2, every=4, choice="gradient"), updates=policy)
    welcome = session.welcome()
    assert welcome.update_gating and welcome.params["update_policy"]["max_interval"] == 3
    edge = HeldWeights()
    edge.replace(decode_tensors(welcome.tensors, welcome.payload, "f32"))
    held_back, merged = 0, 0
    for seq in range(12):
        if seq == 5:
            edge_installs(edge, session.resync(session.version), codec)
        if seq == 7:
            session = restore(snapshot(session), PARAMS, new_distiller, edge_id="cam", session_id=session.session_id,
                              max_size=BOUND, updates=policy).session
        if seq == 10:
            welcome = session.welcome()
            edge.replace(decode_tensors(welcome.tensors, welcome.payload, "f32"))
        before = {key: value.clone() for key, value in edge.state.items()}
        update = distill(session, seq, frames[seq], labels[seq], base_version=session.version, teacher_ms=1.0)
        if update.held_back:
            held_back += 1
            assert (update.tensors, update.payload, update.full) == ([], b"", False)
        elif update.payload and held_back and not update.full:
            merged += 1
        edge_installs(edge, update, codec)
        if update.held_back:
            assert all(torch.equal(edge.state[key], before[key]) for key in before)
        for key, value in session.encoder.held.state.items():
            assert torch.equal(edge.state[key], value), (seq, key)
    assert held_back >= 3 and merged >= 1
