"""HELLO checks and codec agreement (the WebSocket flows are in test_ws_edge.py)."""

from __future__ import annotations

import pytest

from services.server.connections.handshake import check_hello
from services.server.settings import ServerSettings
from shadowtutor.protocol.errors import ErrorCode, ProtocolError
from shadowtutor.protocol.messages import Hello

CLASSES = ("person", "background")


def hello(**overrides) -> Hello:
    return Hello(**{"edge_id": "cam", "class_names": list(CLASSES), "frame_width": 640, "frame_height": 360,
                    **overrides})


def test_codecs_follow_the_edges_preference_within_what_is_allowed() -> None:
    settings = ServerSettings(frame_codecs="jpeg,raw", weight_codecs="f32,f16")
    agreement = check_hello(hello(frame_codecs=["webp", "raw", "jpeg"], weight_codecs=["f16+zstd", "f16"]),
                            settings, CLASSES)
    assert (agreement.frame_codec, agreement.weight_codec) == ("raw", "f16")


def test_a_delta_codec_comes_with_the_edges_first_float_codec_for_full_weights() -> None:
    offered = hello(weight_codecs=["q8delta+zstd", "f16+zstd", "f32"])
    agreement = check_hello(offered, ServerSettings(), CLASSES)
    assert (agreement.weight_codec, agreement.delta_codec) == ("f16+zstd", "q8delta+zstd")
    agreement = check_hello(offered, ServerSettings(weight_codecs="f32,f16+zstd"), CLASSES)
    assert (agreement.weight_codec, agreement.delta_codec) == ("f16+zstd", None)
    with pytest.raises(ProtocolError) as info:
        check_hello(hello(weight_codecs=["q8delta+zstd"]), ServerSettings(), CLASSES)
    assert info.value.code is ErrorCode.UNSUPPORTED_CODEC


@pytest.mark.parametrize(
    ("overrides", "code", "text"),
    [
        ({"edge_id": ""}, ErrorCode.BAD_MESSAGE, "edge_id"),
        ({"edge_id": "x" * 129}, ErrorCode.BAD_MESSAGE, "edge_id"),
        ({"edge_id": "cam\n1"}, ErrorCode.BAD_MESSAGE, "printable"),
        ({"mode": "turbo"}, ErrorCode.BAD_MESSAGE, "mode 'turbo'"),
        ({"student_arch": "big"}, ErrorCode.INCOMPATIBLE_MODEL, "student_arch 'big'"),
        ({"class_names": ["background", "person"]}, ErrorCode.INCOMPATIBLE_MODEL, "same order"),
        ({"frame_height": 0}, ErrorCode.BAD_FRAME, "640x0"),
        ({"frame_width": 1921}, ErrorCode.BAD_FRAME, "1920x1080"),
        ({"frame_codecs": ["gif"]}, ErrorCode.UNSUPPORTED_CODEC, "gif"),
        ({"resume_session_id": "a" * 32}, ErrorCode.BAD_MESSAGE, "go together"),
        ({"resume_session_id": "../x", "resume_version": 3}, ErrorCode.BAD_MESSAGE, "32 hex digits"),
        ({"resume_session_id": "a" * 32, "resume_version": -1}, ErrorCode.BAD_MESSAGE, "resume_version"),
        ({"resume_session_id": "a" * 32, "resume_version": 1, "mode": "naive"}, ErrorCode.BAD_MESSAGE,
         "distill mode"),
    ],
)
def test_refusals(overrides: dict, code: ErrorCode, text: str) -> None:
    with pytest.raises(ProtocolError) as refused:
        check_hello(hello(**overrides), ServerSettings(), CLASSES)
    assert refused.value.code is code and text in refused.value.message


def test_the_student_size_is_the_edges_else_the_servers_and_a_mismatch_is_refused() -> None:
    assert check_hello(hello(), ServerSettings(), CLASSES).student_size is None
    assert check_hello(hello(), ServerSettings(student_size="320x180"), CLASSES).student_size == (320, 180)
    assert check_hello(hello(student_size=[160, 90]), ServerSettings(), CLASSES).student_size == (160, 90)
    assert check_hello(hello(student_size=[320, 180]), ServerSettings(student_size="320x180"),
                       CLASSES).student_size == (320, 180)
    for size, code in (([0, 90], ErrorCode.BAD_MESSAGE), ([1921, 90], ErrorCode.BAD_MESSAGE),
                       ([320], ErrorCode.BAD_MESSAGE), ([160, 90], ErrorCode.INCOMPATIBLE_MODEL)):
        with pytest.raises(ProtocolError) as refused:
            check_hello(hello(student_size=size), ServerSettings(student_size="320x180"), CLASSES)
        assert refused.value.code is code
