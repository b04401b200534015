"""A session rebuilt from a snapshot and the journal entries after it holds the edge's weights bit for
bit at the newest version and goes on with updates the edge can apply (real distillation, real codecs)."""

from __future__ import annotations

import pytest
import torch

from services.checkpoints.journal import entry, replay
from services.checkpoints.pack import archive, unarchive
from services.checkpoints.session import CheckpointFormatError, restore, snapshot
from services.server.teaching.session import EdgeSession, Traffic
from shadowtutor.algorithms.sparse_options import SparseOptions
from shadowtutor.protocol.agreement import Agreement
from shadowtutor.protocol.codecs import decode_tensors, is_delta_codec
from shadowtutor.protocol.messages import Hello, Labels, Update, encode
from shadowtutor.protocol.sparse_delta import decode_sparse, is_sparse_codec
from shadowtutor.protocol.weight_sync import HeldWeights
from tests.services.checkpoints.test_session import BOUND, PARAMS, new_distiller
from tests.support.scene import CLASS_NAMES, make_frames
from tests.support.sessions import distill

CODECS = {"dense": ("f16+zstd", "q8delta+zstd"), "sparse": ("f32", "q4sparse+zstd")}


def _session(kind: str) -> EdgeSession:
    weight_codec, delta_codec = CODECS[kind]
    hello = Hello(edge_id="cam", class_names=list(CLASS_NAMES), frame_width=64, frame_height=48)
    sparse = SparseOptions(fraction=0.05, every=2, choice="gradient") if kind == "sparse" else SparseOptions()
    return EdgeSession(
        hello=hello,
        agreement=Agreement(frame_codec="raw", weight_codec=weight_codec, delta_codec=delta_codec),
        params=PARAMS,
        traffic=Traffic(),
        distiller=new_distiller((64, 48)),
        sparse=sparse,
    )


def _edge_installs(edge: HeldWeights, update: Update, kind: str) -> None:
    """What the edge agent does with an UPDATE (edge_agent.versioning)."""
    weight_codec, delta_codec = CODECS[kind]
    codec = weight_codec if update.full else delta_codec
    if update.full:
        edge.replace(decode_tensors(update.tensors, update.payload, codec))
    elif is_sparse_codec(codec):
        edge.apply_sparse(decode_sparse(update.tensors, update.payload, codec, edge.coordinates))
    else:
        edge.apply(decode_tensors(update.tensors, update.payload, codec), delta=is_delta_codec(codec))


def _run(kind: str, updates: int, snapshot_at: int) -> tuple[EdgeSession, HeldWeights, bytes, list[bytes], Update]:
    """A session trained on ``updates`` key frames, the edge applying each; its snapshot after
    ``snapshot_at`` updates, the journal entries of the versions after it, and the last UPDATE."""
    frames, labels = make_frames(updates)
    session, edge = _session(kind), HeldWeights()
    welcome = session.welcome()
    edge.replace(decode_tensors(welcome.tensors, welcome.payload, CODECS[kind][0]))
    taken, entries = b"", []
    for seq in range(updates):
        update = distill(session, seq, frames[seq], labels[seq], base_version=session.version, teacher_ms=1.0)
        _edge_installs(edge, update, kind)
        if seq + 1 == snapshot_at:
            taken = snapshot(session, update, seq)
        elif seq + 1 > snapshot_at:
            entries.append(entry(session, update, seq))
    return session, edge, taken, entries, update


@pytest.mark.parametrize("kind", ["dense", "sparse"])
def test_a_session_rebuilt_from_its_journal_holds_the_edges_weights_and_goes_on(kind: str) -> None:
    original, edge, taken, entries, last = _run(kind, updates=6, snapshot_at=2)
    restored = restore(taken, PARAMS, new_distiller, edge_id="cam", session_id=original.session_id, max_size=BOUND)
    assert restored.session.version == 2
    restored = replay(restored, entries, edge_id="cam", session_id=original.session_id)
    copy = restored.session
    assert (copy.version, copy.last_seq, restored.reply_seq) == (6, original.last_seq, 5)
    assert restored.reply is not None and encode(restored.reply) == encode(last)
    # the mirror holds the part updates change: the trainable tensors
    assert set(copy.encoder.held.state) == set(copy.distiller.trainable_keys)
    for key, value in copy.encoder.held.state.items():
        assert torch.equal(edge.state[key], value), key
    student = copy.distiller.student.state_dict()
    for key in copy.distiller.trainable_keys:  # it trains on from what the edge holds
        assert torch.equal(student[key].float(), edge.state[key]), key
    frames, labels = make_frames(8)
    for seq in (6, 7):
        update = distill(copy, seq, frames[seq], labels[seq], base_version=copy.version, teacher_ms=1.0)
        assert not update.full and update.base_version == seq
        _edge_installs(edge, update, kind)
        for key, value in copy.encoder.held.state.items():
            assert torch.equal(edge.state[key], value), (seq, key)


def test_the_journal_is_read_up_to_its_first_gap() -> None:
    original, _, taken, entries, _ = _run("dense", updates=5, snapshot_at=1)
    restored = restore(taken, PARAMS, new_distiller, edge_id="cam", session_id=original.session_id, max_size=BOUND)
    restored = replay(restored, [entries[0], entries[2], entries[3]], edge_id="cam", session_id=original.session_id)
    assert restored.session.version == 2 and restored.reply_seq == 1


def _tampered(data: bytes, **fields: object) -> bytes:
    return archive({**unarchive(data), **fields})


@pytest.mark.parametrize("case", ["other edge", "other session", "not an update", "wrong base", "kind"])
def test_a_journal_entry_that_is_not_this_sessions_next_is_refused_in_one_line(case: str) -> None:
    original, _, taken, entries, _ = _run("dense", updates=3, snapshot_at=1)
    labels = Labels(seq=0, frame_index=0, codec="raw", width=1, height=1, payload=b"\0")
    bad = {
        "other edge": lambda: _tampered(entries[0], edge_id="cam-2"),
        "other session": lambda: _tampered(entries[0], session_id="0" * 32),
        "not an update": lambda: _tampered(entries[0], reply=encode(labels)),
        # version 3's UPDATE (from version 2) where version 2's belongs
        "wrong base": lambda: _tampered(entries[1], version=2),
        "kind": lambda: _tampered(entries[0], kind="snapshot"),
    }[case]()
    restored = restore(taken, PARAMS, new_distiller, edge_id="cam", session_id=original.session_id, max_size=BOUND)
    with pytest.raises(CheckpointFormatError) as refused:
        replay(restored, [bad], edge_id="cam", session_id=original.session_id)
    assert "\n" not in str(refused.value)
    assert restored.session.version == 1  # left as it was
