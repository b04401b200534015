"""Session versions (partial vs full updates, resync), stats and the session limit."""

from __future__ import annotations

import pytest
import torch

from services.server.metrics.server_metrics import ServerMetrics
from services.server.teaching.session import EdgeSession, SessionRegistry, Traffic
from shadowtutor.algorithms.distill import Distiller
from shadowtutor.algorithms.params import AlgorithmParams
from shadowtutor.algorithms.update_policy import UpdatePolicy
from shadowtutor.models.student import StudentNet
from shadowtutor.protocol.agreement import Agreement
from shadowtutor.protocol.codecs import decode_tensors
from shadowtutor.protocol.errors import ErrorCode, ProtocolError
from shadowtutor.protocol.messages import Hello
from shadowtutor.protocol.weight_sync import HeldWeights
from tests.support.prometheus import sample_value
from tests.support.scene import CLASS_NAMES, make_frames
from tests.support.sessions import distill


def session(mode: str = "distill", edge_id: str = "cam") -> EdgeSession:
    torch.manual_seed(0)
    params = AlgorithmParams(max_updates=1, threshold=0.99)
    distiller = Distiller(StudentNet(3), params, background=2) if mode == "distill" else None
    hello = Hello(edge_id=edge_id, class_names=list(CLASS_NAMES), frame_width=64, frame_height=48, mode=mode,
                  token="secret-token")
    return EdgeSession(
        hello=hello,
        agreement=Agreement(frame_codec="raw", weight_codec="f32"),
        params=params,
        traffic=Traffic(),
        distiller=distiller,
    )


def test_versions_partial_full_and_resync() -> None:
    s = session()
    (frame, *_), (label, *_) = make_frames(1)
    assert s.welcome().version == 0 and len(s.welcome().tensors) == len(StudentNet(3).state_dict())
    s.accept_seq(0)
    first = distill(s, 0, frame, label, base_version=0, teacher_ms=3.0)
    assert (first.base_version, first.version, first.full, first.teacher_ms) == (0, 1, False, 3.0)
    assert [t["name"] for t in first.tensors] == StudentNet(3).trainable_keys("partial")
    s.accept_seq(1)
    stale = distill(s, 1, frame, label, base_version=0, teacher_ms=3.0)
    assert (stale.base_version, stale.version, stale.full) == (0, 2, True)
    resync = s.resync(have_version=1)
    assert (resync.seq, resync.base_version, resync.version, resync.full, resync.steps) == (1, 1, 3, True, 0)
    state = decode_tensors(resync.tensors, resync.payload, "f32")
    torch.testing.assert_close(state, dict(s.distiller.student.state_dict()))
    info = s.info()
    assert (info.version, info.mean_steps, info.last_metric) == (3, 1.0, stale.metric)
    assert "secret-token" not in info.model_dump_json()


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_a_delta_session_keeps_the_edge_and_the_mirror_bit_identical_and_near_the_student(precision: str) -> None:
    """At bf16 too: the server trains float32 master weights, and what the edge holds is what the mirror holds."""
    torch.manual_seed(0)
    params = AlgorithmParams(max_updates=2, threshold=0.99)
    hello = Hello(edge_id="cam", class_names=list(CLASS_NAMES), frame_width=64, frame_height=48)
    distiller = Distiller(StudentNet(3), params, background=2, precision=precision)  # type: ignore[arg-type]
    s = EdgeSession(
        hello=hello,
        agreement=Agreement(frame_codec="raw", weight_codec="f16+zstd", delta_codec="q8delta+zstd"),
        params=params,
        traffic=Traffic(),
        distiller=distiller,
    )
    welcome = s.welcome()
    assert (welcome.weight_codec, welcome.delta_codec) == ("f16+zstd", "q8delta+zstd")
    edge = HeldWeights()  # the edge agent's rule: decode, then replace or add
    edge.replace(decode_tensors(welcome.tensors, welcome.payload, "f16+zstd"))
    frames, labels = make_frames(4)
    sent = 0
    for seq, (frame, label) in enumerate(zip(frames, labels, strict=True)):
        s.accept_seq(seq)
        update = distill(s, seq, frame, label, base_version=s.version, teacher_ms=0.0)
        assert not update.full
        sent += len(update.tensors)
        edge.apply(decode_tensors(update.tensors, update.payload, "q8delta+zstd"), delta=True)
        student = s.distiller.student.state_dict()
        assert {value.dtype for value in student.values() if value.is_floating_point()} == {torch.float32}
        for key, value in edge.state.items():
            assert torch.equal(value, s.encoder.held.state[key]), key
            # the server trains on from its float weights; the edge is within half a step (f16 or int8) of them
            assert torch.allclose(value, student[key], atol=0.02, rtol=1e-3), key
    assert sent > 0
    full = s.resync(have_version=0)
    assert full.full and decode_tensors(full.tensors, full.payload, "f16+zstd").keys() == edge.state.keys()


def test_seq_must_increase() -> None:
    s = session()
    s.accept_seq(4)
    with pytest.raises(ProtocolError, match="seq 4 does not follow seq 4"):
        s.accept_seq(4)
    assert s.stats.key_frames == 1


def test_naive_session_has_no_student() -> None:
    s = session("naive")
    assert s.welcome().tensors == [] and s.welcome().payload == b""
    with pytest.raises(ProtocolError) as refused:
        s.resync(0)
    assert refused.value.code is ErrorCode.UNEXPECTED_MESSAGE


def test_registry_limit_and_gauge() -> None:
    metrics = ServerMetrics()
    registry = SessionRegistry(max_sessions=1, metrics=metrics)
    first, second = session("naive", "cam-1"), session("naive", "cam-2")
    registry.add(first)
    with pytest.raises(ProtocolError) as busy:
        registry.add(second)
    assert busy.value.code is ErrorCode.SERVER_BUSY and len(registry) == 1
    assert sample_value(metrics.exposition().decode(), "shadowtutor_server_sessions") == 1
    registry.remove(first)
    registry.add(second)
    assert registry.all() == [second]


def test_a_new_session_of_the_same_edge_replaces_the_old_one() -> None:
    registry = SessionRegistry(max_sessions=1, metrics=ServerMetrics())
    old, new = session("naive", "cam-1"), session("naive", "cam-1")
    evicted: list[ProtocolError] = []
    old.evict = evicted.append
    registry.add(old)
    registry.add(new)  # the full registry has room: the new session takes the old one's slot
    assert registry.all() == [new]
    (error,) = evicted
    assert error.code is ErrorCode.SESSION_REPLACED and new.session_id in error.message
    registry.remove(old)  # the old connection's own clean-up later leaves the new session alone
    assert registry.all() == [new]


def test_the_welcome_names_the_student_size_the_servers_copy_trains_at() -> None:
    params = AlgorithmParams(max_updates=1, threshold=0.99)
    hello = Hello(edge_id="cam", class_names=list(CLASS_NAMES), frame_width=64, frame_height=48)
    scaled = EdgeSession(
        hello=hello,
        agreement=Agreement(frame_codec="raw", weight_codec="f32"),
        params=params,
        traffic=Traffic(),
        distiller=Distiller(StudentNet(3), params, background=2, student_size=(32, 24)),
    )
    assert scaled.welcome().student_size == [32, 24]
    assert session().welcome().student_size is None and session("naive").welcome().student_size is None


def test_a_partial_update_is_encoded_from_the_results_host_weights(monkeypatch: pytest.MonkeyPatch) -> None:
    """The training thread leaves CPU copies of the trained weights in the result; the UPDATE is encoded from them,
    never reading the student (on a GPU, reading it would wait behind the next batch on the device)."""
    s = session()
    (frame, *_), (label, *_) = make_frames(1)
    s.welcome()  # the edge holds the full weights
    s.accept_seq(0)
    result = s.distiller.train(frame, label)
    state = s.distiller.student.state_dict()
    assert result.weights.keys() == set(s.distiller.trainable_keys)
    assert all(t.device.type == "cpu" and torch.equal(t, state[k]) for k, t in result.weights.items())

    def unread(*args: object, **kwargs: object) -> None:
        raise AssertionError("the student's weights were read")

    monkeypatch.setattr(s.distiller.student, "state_dict", unread)
    update = s.trained(0, result, 0.1, base_version=0, teacher_ms=1.0)
    assert (update.version, update.full) == (1, False)
    sent = decode_tensors(update.tensors, update.payload, "f32")
    assert sent.keys() <= result.weights.keys() and sent
    for key, tensor in sent.items():
        torch.testing.assert_close(tensor, result.weights[key], rtol=0, atol=0)


def gated_session(update_gating: bool, budget: float | None = None) -> EdgeSession:
    params = AlgorithmParams(max_updates=1, threshold=0.99)
    hello = Hello(edge_id="cam", class_names=list(CLASS_NAMES), frame_width=64, frame_height=48,
                  update_gating=update_gating, downlink_budget_bps=budget)
    agreement = Agreement(frame_codec="raw", weight_codec="f32", delta_codec="q8delta+zstd")
    return EdgeSession(hello=hello, agreement=agreement, params=params, traffic=Traffic(),
                       distiller=Distiller(StudentNet(3), params, background=2),
                       updates=UpdatePolicy(gated=True, downlink_bps=64_000.0))


def test_updates_are_gated_only_for_an_edge_that_reads_held_back_answers_within_its_own_budget() -> None:
    assert gated_session(False).gate is None and not gated_session(False).welcome().update_gating
    welcome = gated_session(True).welcome()
    assert welcome.update_gating and welcome.params["update_policy"]["downlink_bps"] == 64_000.0
    own = gated_session(True, budget=20_000.0)
    assert own.gate is not None and own.gate.policy.downlink_bps == 20_000.0
    with pytest.raises(ProtocolError) as refused:
        gated_session(True, budget=-1.0)
    assert refused.value.code is ErrorCode.BAD_MESSAGE


def test_a_held_back_answer_reports_the_edges_score_and_counts() -> None:
    s = gated_session(True)
    s.gate.policy = UpdatePolicy(gated=True, min_gain=1.0, max_interval=100)  # nothing pays
    s.welcome()
    (frame, *_), (label, *_) = make_frames(1)
    s.accept_seq(0)
    update = distill(s, 0, frame, label, base_version=0, teacher_ms=1.0)
    assert update.held_back and (update.tensors, update.payload, update.version) == ([], b"", 1)
    assert update.metric == update.initial_metric  # the edge still holds what it held
    info = s.info()
    assert info.updates_held_back == 1 and info.downlink_bps is not None and info.downlink_bps > 0
    resync = s.resync(have_version=1)
    assert resync.full and not resync.held_back
