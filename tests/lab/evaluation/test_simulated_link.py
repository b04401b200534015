from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from shadowtutor.algorithms.client_loop import ClientLoop, UpdateOutcome
from shadowtutor.algorithms.distill import Distiller
from shadowtutor.algorithms.params import AlgorithmParams
from shadowtutor.algorithms.sparse_options import SparseOptions
from shadowtutor.algorithms.update_policy import UpdatePolicy
from shadowtutor.models.inference import TorchBackend
from shadowtutor.models.student import StudentNet
from shadowtutor.protocol.codecs import decode_frame, decode_tensors, encode_frame, encode_tensors
from shadowtutor.scene_store import Scene
from shadowtutor.teachers.base import TeacherAnswer
from shadowtutor_lab.evaluation.simulated_link import (
    LinkCodecs,
    SimulatedLink,
    SimulatedServer,
    SimulatedUpdate,
    update_bytes,
)


class RecordingBackend(TorchBackend):
    """The real torch backend, noting when updates are applied (instrumentation, not a mock)."""

    def __init__(self, student: StudentNet) -> None:
        super().__init__(student)
        self.applied: list[dict[str, torch.Tensor]] = []

    def apply(self, payload: dict[str, torch.Tensor]) -> None:
        self.applied.append(payload)
        self.load_weights(payload)


def _loop(scene_dir: Path, delay: int, mode: str = "partial") -> tuple[ClientLoop, SimulatedLink, RecordingBackend]:
    scene = Scene.open(scene_dir)
    torch.manual_seed(0)
    student = StudentNet(len(scene.meta.class_names))
    params = AlgorithmParams(max_updates=2, mode=mode)
    distiller = Distiller(student, params, background=len(scene.meta.class_names) - 1)
    link = SimulatedLink(SimulatedServer(distiller, lambda index, frame: TeacherAnswer(scene.label(index))), delay)
    runtime = RecordingBackend(student)
    return ClientLoop(params, runtime, link), link, runtime


def test_an_update_arrives_after_its_delay_in_polls() -> None:
    outcome = UpdateOutcome(metric=0.5, payload={}, steps=1)
    update = SimulatedUpdate(outcome, 3)
    assert [update.done() for _ in range(4)] == [False, False, True, True]
    assert update.result() is outcome
    forced = SimulatedUpdate(outcome, 8)
    assert forced.result() is None
    assert forced.wait(None) and forced.done() and forced.result() is outcome


def test_p1_applies_the_update_right_after_its_key_frame(tiny_scene: Path) -> None:
    loop, link, runtime = _loop(tiny_scene, delay=1)
    frames = list(Scene.open(tiny_scene).frames())
    first = loop.process(frames[0])
    assert first.is_key_frame and first.applied_metric is not None and first.waited_seconds == 0.0
    assert len(runtime.applied) == 1
    # the edge now holds exactly the server's trained back part, and only that
    server = link.server.distiller.student.state_dict()
    assert set(runtime.applied[0]) == set(StudentNet(9).trainable_keys("partial"))
    for key, value in runtime.applied[0].items():
        assert torch.equal(value, server[key])
    assert torch.equal(runtime.fast.student.state_dict()["dec2.long_path.0.weight"], server["dec2.long_path.0.weight"])


def test_p8_applies_the_update_at_min_stride_after_waiting(tiny_scene: Path) -> None:
    loop, link, runtime = _loop(tiny_scene, delay=8)
    frames = list(Scene.open(tiny_scene).frames())
    edge_before = {k: v.clone() for k, v in runtime.fast.student.state_dict().items()}
    results = [loop.process(frame) for frame in frames[:9]]
    assert [r.index for r in results if r.applied_metric is not None] == [7]  # step 8 == MIN_STRIDE
    # frames 0..7 ran on the old weights although the server had trained at frame 0
    server_weight = link.server.distiller.student.state_dict()["out_conv3.weight"]
    assert not torch.equal(server_weight, edge_before["out_conv3.weight"])
    assert len(runtime.applied) == 1
    assert results[8].is_key_frame and results[8].index == 8
    assert [r.frame_index for r in link.records] == [0, 8]


def test_the_wait_at_min_stride_forces_a_late_update(tiny_scene: Path) -> None:
    loop, _, runtime = _loop(tiny_scene, delay=20)
    results = [loop.process(frame) for frame in list(Scene.open(tiny_scene).frames())[:9]]
    assert [r.index for r in results if r.applied_metric is not None] == [7]
    assert len(runtime.applied) == 1


def test_records_count_bytes_like_the_paper(tiny_scene: Path) -> None:
    loop, link, _ = _loop(tiny_scene, delay=1, mode="full")
    loop.process(next(Scene.open(tiny_scene).frames()))
    record = link.records[0]
    assert record.bytes_up == 96 * 64 * 3
    assert record.bytes_down == 483_873 * 4  # the whole student, float32
    assert 0 <= record.steps <= 2 and len(record.step_seconds) == record.steps
    assert update_bytes({"a": torch.zeros(3, 4)}) == 48


def test_edges_with_the_same_key_frames_share_the_training(tiny_scene: Path) -> None:
    scene = Scene.open(tiny_scene)
    frames = list(scene.frames())
    calls: list[int] = []

    def label_for(index: int, frame: np.ndarray) -> TeacherAnswer:
        calls.append(index)
        return TeacherAnswer(scene.label(index))

    server = SimulatedServer(Distiller(StudentNet(9), AlgorithmParams(max_updates=1), background=8), label_for)
    fast, slow = SimulatedLink(server, 1), SimulatedLink(server, 8)
    fast.submit(0, frames[0])
    slow.submit(0, frames[0])
    fast.submit(8, frames[8])
    assert calls == [0, 8] and fast.records[0] is slow.records[0]
    with pytest.raises(RuntimeError, match="diverged"):
        slow.submit(9, frames[9])


def _codec_server(scene: Scene, codecs: LinkCodecs, seen: list[np.ndarray]) -> SimulatedServer:
    torch.manual_seed(0)

    def label_for(index: int, frame: np.ndarray) -> TeacherAnswer:
        seen.append(frame)
        return TeacherAnswer(scene.label(index))

    params = AlgorithmParams(max_updates=2, threshold=0.99)
    return SimulatedServer(Distiller(StudentNet(9), params, background=8), label_for, codecs)


def test_with_codecs_the_server_trains_on_the_decoded_frame_and_the_edge_gets_what_it_would_decode(
    tiny_scene: Path,
) -> None:
    scene = Scene.open(tiny_scene)
    frames = list(scene.frames())
    seen: list[np.ndarray] = []
    server = _codec_server(scene, LinkCodecs("jpeg", 50, "f16+zstd", "q8delta+zstd", train_from_held=True), seen)
    # the edge starts from the full weights as they arrive in f16 (WELCOME), and so does this server
    torch.manual_seed(0)
    student = StudentNet(9)  # the one _codec_server made
    welcome = encode_tensors(student.state_dict(), "f16+zstd")
    expected = decode_tensors(welcome.tensors, welcome.payload, "f16+zstd")
    assert all(torch.equal(server.welcome[k], v) for k, v in expected.items())
    link = SimulatedLink(server, 1)
    update = link.submit(0, frames[0])
    update.wait(None)
    jpeg = encode_frame(frames[0], "jpeg", 50)
    assert np.array_equal(seen[0], decode_frame(jpeg, "jpeg", 96, 64)) and not np.array_equal(seen[0], frames[0])
    outcome, record = update.result(), link.records[0]
    assert record.steps > 0 and outcome.payload  # the trained tensors, as absolute values
    trained = server.distiller.student.state_dict()
    assert all(torch.equal(value, trained[key]) for key, value in outcome.payload.items())  # trains on from them
    assert all(torch.equal(value, trained[key]) for key, value in server.welcome.items() if key not in outcome.payload)
    assert len(jpeg) < record.bytes_up < len(jpeg) + 200  # the whole KEY_FRAME message
    assert record.bytes_down < update_bytes(outcome.payload) / 3  # int8 deltas, zstd'd, with the UPDATE header


def test_by_default_the_server_trains_on_from_its_own_float_weights(tiny_scene: Path) -> None:
    scene = Scene.open(tiny_scene)
    server = _codec_server(scene, LinkCodecs("raw", None, "f32", "q8delta+zstd"), [])
    update = SimulatedLink(server, 1).submit(0, next(scene.frames()))
    update.wait(None)
    trained = server.distiller.student.state_dict()
    differs = [key for key, value in update.result().payload.items() if not torch.equal(value, trained[key])]
    assert differs  # the edge holds the quantised weights, the server its float ones


def test_link_codecs_are_checked() -> None:
    with pytest.raises(ValueError, match="float codec"):
        LinkCodecs(weight_codec="q8delta+zstd")
    with pytest.raises(ValueError, match="delta codec"):
        LinkCodecs(delta_codec="f16")
    with pytest.raises(ValueError, match="frame codec"):
        LinkCodecs("gif")
    with pytest.raises(ValueError, match="quality"):
        LinkCodecs("jpeg", 0)


def test_delay_must_be_positive() -> None:
    server = SimulatedServer(Distiller(StudentNet(3), AlgorithmParams(), background=2),
                             lambda i, f: TeacherAnswer(np.zeros((2, 2), np.uint8)))
    with pytest.raises(ValueError, match="delay_frames"):
        SimulatedLink(server, 0)


def test_a_sparse_codec_trains_and_sends_only_the_chosen_coordinates(tiny_scene: Path) -> None:
    scene = Scene.open(tiny_scene)
    frames = list(scene.frames())
    sparse = SparseOptions(fraction=0.05, choice="gradient")
    server = _codec_server(scene, LinkCodecs("raw", None, "f32", "q4sparse+zstd", sparse=sparse), [])
    link = SimulatedLink(server, 1)
    update = link.submit(0, frames[0])
    update.wait(None)
    outcome, record = update.result(), link.records[0]
    coordinates = server.distiller.chooser.coordinates
    assert record.steps > 0 and coordinates is not None
    moved = sum(int((value != server.welcome[key]).sum()) for key, value in outcome.payload.items())
    trainable = sum(server.welcome[key].numel() for key in server.distiller.trainable_keys)
    assert 0 < moved <= coordinates.size == round(sparse.fraction * trainable)
    dense = _codec_server(scene, LinkCodecs("raw", None, "f32", "q8delta+zstd"), [])
    dense_link = SimulatedLink(dense, 1)
    dense_link.submit(0, frames[0]).wait(None)
    assert record.bytes_down < dense_link.records[0].bytes_down / 3


def test_an_h264_link_at_half_scale_trains_on_the_stream_as_the_server_decodes_it(tiny_scene: Path) -> None:
    from edge_agent.frame_encoder import FrameEncoder
    from shadowtutor.protocol.video_stream import StreamDecoder

    scene = Scene.open(tiny_scene)
    frames = list(scene.frames())
    seen: list[np.ndarray] = []
    server = _codec_server(scene, LinkCodecs("h264", None, "f32", "q8delta+zstd", key_frame_scale=0.5), seen)
    link = SimulatedLink(server, 1)
    for index in (0, 8):
        link.submit(index, frames[index]).wait(None)
    encoder, decoder = FrameEncoder(scale=0.5), StreamDecoder(48, 32)
    expected = [decoder.decode(e.payload, e.stream_position) for e in
                (encoder.encode(frames[i], "h264", "edge") for i in (0, 8))]
    assert [s.shape for s in seen] == [(32, 48, 3)] * 2
    assert all(np.array_equal(s, e) for s, e in zip(seen, expected, strict=True))
    assert all(record.steps > 0 for record in link.records)  # trained with the labels at the sent size
    assert link.records[1].bytes_up < link.records[0].bytes_up  # an inter frame after the intra one


def test_a_key_frame_scale_outside_zero_to_one_is_refused() -> None:
    with pytest.raises(ValueError, match="scale"):
        LinkCodecs("h264", key_frame_scale=0.0)


def test_gated_updates_on_the_link_go_through_the_servers_gate(tiny_scene: Path) -> None:
    """The simulated server holds back what the server's UpdateGate holds back: an answer without weights, whose
    metric is the held weights' score; the update that follows carries the training held back."""
    scene = Scene.open(tiny_scene)
    frames = list(scene.frames())
    never_by_gain = UpdatePolicy(gated=True, min_gain=1.0, max_interval=2)
    server = _codec_server(scene, LinkCodecs("raw", None, "f32", "q8delta+zstd", updates=never_by_gain), [])
    link = SimulatedLink(server, 1)
    outcomes = []
    for index in (0, 1):
        update = link.submit(index, frames[index])
        update.wait(None)
        outcomes.append(update.result())
    held, sent = link.records
    assert held.held_back and not sent.held_back and outcomes[0].payload == {}
    assert held.metric == held.initial_metric and held.bytes_down < 400
    assert outcomes[1].payload and sent.bytes_down > 10 * held.bytes_down
    with pytest.raises(ValueError, match="delta codec"):
        LinkCodecs(updates=never_by_gain)
