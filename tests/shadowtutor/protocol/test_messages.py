from __future__ import annotations

import json
import struct
import typing
from dataclasses import fields

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shadowtutor.protocol.errors import CloseCode, ErrorCode, ProtocolError
from shadowtutor.protocol.messages import (
    MESSAGE_TYPES,
    PREFIX,
    Error,
    Hello,
    KeyFrame,
    Update,
    decode,
    encode,
)


def test_round_trip_keeps_header_and_payload() -> None:
    hello = Hello(edge_id="cam-1", class_names=["person", "background"], frame_width=64, frame_height=48,
                  frame_codecs=["jpeg", "raw"], payload=b"")
    assert decode(encode(hello)) == hello
    frame = KeyFrame(seq=3, frame_index=17, base_version=2, codec="raw", width=2, height=1, payload=b"\x01" * 6)
    assert decode(encode(frame)) == frame


def test_float_fields_accept_json_integers() -> None:
    update = Update(seq=1, base_version=0, version=1, metric=1, initial_metric=0, steps=0, full=False, tensors=[])
    decoded = decode(encode(update))
    assert isinstance(decoded, Update) and decoded.metric == 1.0 and isinstance(decoded.metric, float)


@pytest.mark.parametrize(
    ("data", "code"),
    [
        (b"", ErrorCode.BAD_MESSAGE),
        (b"XX" + bytes(6), ErrorCode.BAD_MESSAGE),
        (PREFIX.pack(b"ST", 9, 1, 2) + b"{}", ErrorCode.UNSUPPORTED_VERSION),
        (PREFIX.pack(b"ST", 1, 99, 2) + b"{}", ErrorCode.BAD_MESSAGE),
        (PREFIX.pack(b"ST", 1, 1, 50) + b"{}", ErrorCode.BAD_MESSAGE),
        (PREFIX.pack(b"ST", 1, 1, 2) + b"[]", ErrorCode.BAD_MESSAGE),
        (PREFIX.pack(b"ST", 1, 1, 3) + b"{x}", ErrorCode.BAD_MESSAGE),
        (PREFIX.pack(b"ST", 1, 3, 2) + b"{}", ErrorCode.BAD_MESSAGE),  # KeyFrame without fields
    ],
)
def test_malformed_messages_raise_typed_errors(data: bytes, code: ErrorCode) -> None:
    with pytest.raises(ProtocolError) as info:
        decode(data)
    assert info.value.code is code


def test_wrong_field_types_are_rejected() -> None:
    good = encode(KeyFrame(seq=1, frame_index=1, base_version=0, codec="raw", width=1, height=1))
    header = good[PREFIX.size:].replace(b'"width":1', b'"width":"1"')
    bad = struct.pack(">2sBBI", b"ST", 1, 3, len(header)) + header
    with pytest.raises(ProtocolError, match="width"):
        decode(bad)
    with pytest.raises(ProtocolError, match="text frames"):
        decode("hello")


def test_error_codes_map_to_close_codes() -> None:
    assert ErrorCode.SERVER_BUSY.close == CloseCode.TRY_AGAIN_LATER
    assert ErrorCode.UNAUTHORIZED.close == CloseCode.POLICY_VIOLATION
    err = Error(code=ErrorCode.BAD_FRAME.value, message="m", fatal=True, seq=4)
    assert decode(encode(err)) == err


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_decode_of_random_bytes_only_raises_protocol_errors(data: bytes) -> None:
    try:
        decode(data)
    except ProtocolError:
        pass


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 10), st.binary(max_size=120))
def test_decode_of_valid_prefix_with_random_header(type_id: int, body: bytes) -> None:
    try:
        decode(PREFIX.pack(b"ST", 1, type_id, len(body)) + body)
    except ProtocolError:
        pass


JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=4), children, max_size=3),
    max_leaves=6,
)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(sorted(MESSAGE_TYPES)), st.data())
def test_decode_of_real_field_names_with_any_json_values(type_id: int, data: st.DataObject) -> None:
    """Every known field with any JSON value (or left out): a typed error, or a message whose fields conform."""
    cls = MESSAGE_TYPES[type_id]
    names = [f.name for f in fields(cls) if f.name != "payload"]
    header = data.draw(st.fixed_dictionaries({}, optional={name: JSON for name in names}))
    try:
        message = decode(PREFIX.pack(b"ST", 1, type_id, 0)[:4] + _header_bytes(header))
    except ProtocolError as exc:
        assert exc.code is ErrorCode.BAD_MESSAGE
        return
    hints = typing.get_type_hints(cls)
    for name in names:
        value = getattr(message, name)
        assert value == header.get(name, value)
        if hints[name] in (int, float, str, bool):
            assert type(value) is hints[name]


def _header_bytes(header: dict) -> bytes:
    raw = json.dumps(header).encode()
    return struct.pack(">I", len(raw)) + raw


def _raw_message(type_id: int, header_text: bytes) -> bytes:
    return PREFIX.pack(b"ST", 1, type_id, len(header_text)) + header_text


@pytest.mark.parametrize(
    ("header_text", "reason"),
    [
        (b"[" * 60_000, "nested too deeply"),  # json's recursion limit: was a RecursionError, not a typed error
        (b'{"x":' * 12_000, "nested too deeply"),
        (b'{"edge_id": "\\ud800"}', "lone surrogate"),  # was accepted: failed later in a hash or a response
        (b'{"a": {"b": ["\\udfff"]}}', "lone surrogate"),
        (b'{"\\ud800": 1}', "lone surrogate"),
    ],
)
def test_headers_that_python_parses_but_cannot_use_are_bad_messages(header_text: bytes, reason: str) -> None:
    with pytest.raises(ProtocolError, match=reason) as info:
        decode(_raw_message(Hello.TYPE, header_text))
    assert info.value.code is ErrorCode.BAD_MESSAGE


@given(st.text(st.characters(codec=None, exclude_categories=()), max_size=12))
def test_any_text_field_decodes_to_encodable_text_or_a_bad_message(text: str) -> None:
    """JSON escapes (what ``json.dumps`` writes for a lone surrogate) must never yield unencodable text."""
    header = {"edge_id": "cam", "class_names": ["a"], "frame_width": 2, "frame_height": 2, "agent": text}
    try:
        hello = decode(_raw_message(Hello.TYPE, json.dumps(header).encode()))
    except ProtocolError as exc:
        assert exc.code is ErrorCode.BAD_MESSAGE and "surrogate" in exc.message
        return
    assert isinstance(hello, Hello) and hello.agent == text
    hello.agent.encode()


@pytest.mark.parametrize("mode", ["distill", "naive", "turbo", 1])
def test_a_hellos_mode_decodes_only_as_one_of_the_session_modes(mode: object) -> None:
    header = {"edge_id": "cam", "class_names": ["a"], "frame_width": 2, "frame_height": 2, "mode": mode}
    data = _raw_message(Hello.TYPE, json.dumps(header).encode())
    if mode in ("distill", "naive"):
        hello = decode(data)
        assert isinstance(hello, Hello) and hello.mode == mode
        return
    with pytest.raises(ProtocolError, match="Hello.mode has a bad value") as info:
        decode(data)
    assert info.value.code is ErrorCode.BAD_MESSAGE
