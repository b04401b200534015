"""The edge's side of resuming a session: the HELLO names the session and version the edge holds, and a
resumed WELCOME is taken only for exactly that session and version, with no weights staged."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import pytest
import torch

from edge_agent.handshake import SessionTerms, accept_welcome, resuming
from edge_agent.versioning import WeightUpdate
from shadowtutor.algorithms.params import AlgorithmParams
from shadowtutor.classes import LVS_CLASSES
from shadowtutor.models.checkpoint import student_layout
from shadowtutor.protocol.codecs import encode_tensors
from shadowtutor.protocol.errors import ProtocolError
from shadowtutor.protocol.messages import Hello, Welcome
from tests.support.update_bombs import dense_bomb

SESSION = "a" * 32


@dataclass
class Sink:
    session_id: str | None = None
    version: int = -1
    staged: list[WeightUpdate] = field(default_factory=list)
    full_layout: dict[str, tuple[int, ...]] = field(default_factory=lambda: student_layout(len(LVS_CLASSES)))

    def stage(self, update: WeightUpdate) -> None:
        self.staged.append(update)


def _hello() -> Hello:
    return Hello(edge_id="cam", class_names=list(LVS_CLASSES), frame_width=48, frame_height=32)


def _terms(session_id: str = SESSION) -> SessionTerms:
    return SessionTerms(session_id=session_id, params=AlgorithmParams(), frame_codec="raw", weight_codec="f32")


def _welcome(version: int, resumed: bool, session_id: str = SESSION) -> Welcome:
    return Welcome(session_id=session_id, version=version, frame_codec="raw", weight_codec="f32",
                   params=AlgorithmParams().to_dict(), class_names=list(LVS_CLASSES), resumed=resumed)


def test_the_hello_asks_to_resume_only_the_session_whose_weights_the_edge_holds() -> None:
    hello = _hello()
    assert resuming(hello, None, Sink(SESSION, 7)) is hello  # no session yet
    assert resuming(hello, _terms(), None) is hello  # naive mode: nothing held
    assert resuming(hello, _terms(), Sink("b" * 32, 7)) is hello  # the weights are another session's
    asked = resuming(hello, _terms(), Sink(SESSION, 7))
    assert (asked.resume_session_id, asked.resume_version) == (SESSION, 7)


def test_a_resumed_welcome_keeps_the_held_weights() -> None:
    sink = Sink(SESSION, 7)
    hello = resuming(_hello(), _terms(), sink)
    terms = accept_welcome(hello, _welcome(7, resumed=True), sink)
    assert terms.session_id == SESSION and sink.staged == []


@pytest.mark.parametrize("welcome", [_welcome(6, resumed=True), _welcome(7, resumed=True, session_id="c" * 32)])
def test_a_resumed_welcome_of_another_session_or_version_is_refused(welcome: Welcome) -> None:
    sink = Sink(SESSION, 7)
    with pytest.raises(ProtocolError, match="this edge asked for"):
        accept_welcome(resuming(_hello(), _terms(), sink), welcome, sink)
    assert sink.staged == []


def test_a_server_that_does_not_resume_opens_a_new_session_with_full_weights() -> None:
    sink = Sink(SESSION, 7)
    welcome = _welcome(0, resumed=False, session_id="d" * 32)
    with pytest.raises(ProtocolError, match="no weights"):  # a new session must carry them
        accept_welcome(resuming(_hello(), _terms(), sink), welcome, sink)


def test_welcome_weights_that_are_not_the_students_are_refused_before_decompression() -> None:
    descriptors, payload = dense_bomb()
    welcome = dataclasses.replace(_welcome(0, resumed=False), tensors=descriptors,
                                  payload=payload)
    sink = Sink()
    with pytest.raises(ProtocolError, match="evil.weight"):
        accept_welcome(_hello(), welcome, sink)
    layout = student_layout(len(LVS_CLASSES))
    some = encode_tensors({name: torch.zeros(shape) for name, shape in list(layout.items())[:3]}, "f32")
    with pytest.raises(ProtocolError, match="full weights without"):
        accept_welcome(_hello(), dataclasses.replace(welcome, tensors=some.tensors, payload=some.payload), sink)
    whole = encode_tensors({name: torch.zeros(shape) for name, shape in layout.items()}, "f32")
    accept_welcome(_hello(), dataclasses.replace(welcome, tensors=whole.tensors, payload=whole.payload), sink)
    assert sink.staged[0].tensors.keys() == layout.keys()


def test_a_welcome_that_gates_updates_is_taken_only_by_an_edge_that_offered_to_read_them() -> None:
    sink = Sink(SESSION, 7)
    gated = Welcome(session_id=SESSION, version=7, frame_codec="raw", weight_codec="f32",
                    params={**AlgorithmParams().to_dict(), "update_policy": {"gated": True}},
                    class_names=list(LVS_CLASSES), resumed=True, update_gating=True)
    with pytest.raises(ProtocolError, match="did not offer"):
        accept_welcome(resuming(_hello(), _terms(), sink), gated, sink)
    offered = dataclasses.replace(_hello(), update_gating=True)
    assert accept_welcome(resuming(offered, _terms(), sink), gated, sink).session_id == SESSION
