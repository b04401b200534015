from __future__ import annotations

import random
import struct
import zlib

import numpy as np
import pytest

from services.server.connections.handshake import check_hello
from services.server.settings import ServerSettings
from shadowtutor.protocol.codecs import FRAME_CODECS
from shadowtutor.protocol.errors import ErrorCode, ProtocolError
from shadowtutor.protocol.h264_sps import sequence_parameters
from shadowtutor.protocol.image_header import declared_size
from shadowtutor.protocol.messages import Hello, KeyFrame, decode
from shadowtutor.protocol.video_stream import MAX_REF_FRAMES, StreamDecoder
from shadowtutor_lab.stress.decoder_memory import x264_units
from shadowtutor_lab.stress.fuzz_cases import (
    ANY,
    BOMB_BYTES,
    CATEGORIES,
    CLOSE,
    CODEC_NAMES,
    CONTINUE,
    DROP,
    HUGE_SIDE,
    MANY_REFERENCES,
    PROBE_SEQ,
    PROBE_VERSION,
    Drop,
    Send,
    Target,
    _client_frame,
    _jpeg_declaring,
    _png_bomb,
    _png_declaring,
    make_case,
    probe_message,
    unknown_codec,
)
from shadowtutor_lab.stress.fuzz_server import synthetic_frames

CLASSES = ("person", "auto", "background")


@pytest.fixture(scope="module")
def target() -> Target:
    return Target(CLASSES, 32, 24, synthetic_frames(32, 24, 4, seed=0), max_message_bytes=4096)


def test_cases_repeat_by_seed_and_differ_between_seeds(target: Target) -> None:
    first = [make_case(7, i, target) for i in range(2 * len(CATEGORIES))]
    assert first == [make_case(7, i, target) for i in range(2 * len(CATEGORIES))]
    other = [make_case(8, i, target) for i in range(2 * len(CATEGORIES))]
    assert [c.steps for c in first] != [c.steps for c in other]


def test_categories_come_in_turn_and_each_is_produced(target: Target) -> None:
    cases = [make_case(1, i, target) for i in range(3 * len(CATEGORIES))]
    assert [c.category for c in cases[: len(CATEGORIES)]] == list(CATEGORIES)
    only = [make_case(1, i, target, ("oversize", "valid")).category for i in range(4)]
    assert only == ["oversize", "valid", "oversize", "valid"]
    with pytest.raises(ValueError, match="no fuzz categories"):
        make_case(1, 0, target, ())


@pytest.mark.parametrize("category", list(CATEGORIES))
def test_each_category_builds_well_formed_cases(target: Target, category: str) -> None:
    cases = [make_case(3, i, target, (category,)) for i in range(12)]
    for case in cases:
        assert case.category == category and case.variant
        if case.hello is not None:  # the session opens with a valid HELLO of this target
            hello = decode(case.hello)
            assert isinstance(hello, Hello) and tuple(hello.class_names) == CLASSES
            assert case.mode == hello.mode
        assert case.expect.end in (CLOSE, CONTINUE, ANY, DROP)
        assert case.probe == bool(case.steps)
        assert all(isinstance(step, (Send, Drop)) for step in case.steps)
        if case.expect.codes is not None:
            assert case.expect.codes <= {code.value for code in ErrorCode}
    drops = [isinstance(c.steps[-1], Drop) for c in cases if c.steps]
    assert all(drops) if category == "disconnect" else not any(drops)


def test_expectations_follow_the_protocol(target: Target) -> None:
    by_variant = {}
    for i in range(400):
        case = make_case(5, i, target)
        by_variant.setdefault((case.category, case.variant), case)
    second = next(c for (cat, _), c in by_variant.items() if cat == "second_hello")
    assert second.expect.end == CLOSE and second.expect.require == "unexpected_message"
    oversize = [c for (cat, _), c in by_variant.items() if cat == "oversize"]
    assert oversize and all(len(c.steps[0].data) > target.max_message_bytes for c in oversize)
    bad = [c for (cat, _), c in by_variant.items() if cat == "bad_key_frame"]
    assert all(c.expect.end == CONTINUE for c in bad)
    assert any(c.expect.require == "bad_frame" for c in bad)
    assert {"bad_frame", "unsupported_codec", "teacher_failed"} <= set().union(*(c.expect.codes for c in bad))
    silent = [c for c in by_variant.values() if not c.steps]
    assert silent and all(c.category == "before_hello" and not c.probe for c in silent)


def test_probes_are_recognisable(target: Target) -> None:
    assert decode(probe_message("distill", target)).have_version == PROBE_VERSION
    key_frame = decode(probe_message("naive", target))
    assert isinstance(key_frame, KeyFrame) and key_frame.seq == PROBE_SEQ


def test_crafted_images_declare_what_they_claim(target: Target) -> None:
    assert declared_size(_png_declaring(HUGE_SIDE, HUGE_SIDE), "png") == (HUGE_SIDE, HUGE_SIDE)
    jpeg = target.frame_bytes("jpeg")
    assert declared_size(_jpeg_declaring(jpeg, HUGE_SIDE, 7), "jpeg") == (HUGE_SIDE, 7)
    bomb = _png_bomb(32, 24)
    assert declared_size(bomb, "png") == (32, 24) and len(bomb) < BOMB_BYTES // 500
    idat_length = struct.unpack(">I", bomb[33:37])[0]
    assert len(zlib.decompress(bomb[41 : 41 + idat_length])) == BOMB_BYTES


def test_client_frames_are_masked_binary_frames_of_the_right_length() -> None:
    for size, header in ((5, 6), (200, 8), (70_000, 14)):
        frame = _client_frame(bytes(size))
        assert frame[0] == 0x82 and frame[1] & 0x80 and len(frame) == size + header


def test_target_checks_its_frames() -> None:
    with pytest.raises(ValueError, match="at least one"):
        Target(CLASSES, 32, 24, ())
    with pytest.raises(ValueError, match="uint8 24x32x3"):
        Target(CLASSES, 32, 24, (np.zeros((24, 31, 3), np.uint8),))


def test_auth_cases_present_wrong_tokens_and_expect_unauthorized() -> None:
    token = "T" * 43
    target = Target(CLASSES, 32, 24, synthetic_frames(32, 24, 4, seed=0), token=token, edge_id="cam-1")
    cases = [make_case(5, i, target, ("auth",)) for i in range(60)]
    assert len({c.variant for c in cases}) == 8
    for case in cases:
        assert case.hello is None and case.expect.end == CLOSE and case.expect.require == "unauthorized"
        (step,) = case.steps
        hello = decode(step.data)
        assert isinstance(hello, Hello)
        assert (hello.edge_id, hello.token) != ("cam-1", token)  # never the right pair


def test_auth_cases_against_a_server_whose_tokens_are_unknown_accept_any_answer(target: Target) -> None:
    case = make_case(5, 0, target, ("auth",))
    assert case.expect.end == ANY


def test_under_tokens_a_refused_edge_id_is_unauthorized_first() -> None:
    target = Target(CLASSES, 32, 24, synthetic_frames(32, 24, 4, seed=0), token="T" * 43, edge_id="cam-1")
    cases = [make_case(2, i, target, ("hello_fields",)) for i in range(80)]
    for case in cases:
        try:
            hello = decode(case.steps[0].data)
        except ProtocolError:
            # refused as it is read (a field of a bad value, its edge id the right one): bad_message
            assert case.expect.require == "bad_message", case.variant
            continue
        wrong_id = hello.edge_id != "cam-1"
        assert (case.expect.require == "unauthorized") == wrong_id, case.variant


@pytest.mark.parametrize("asks", [True, False])
def test_telemetry_cases_expect_what_the_protocol_says(target: Target, asks: bool) -> None:
    """Reports the receiver's rules accept keep the session; the others are refused as bad_message;
    a server that asked for no TELEMETRY refuses both as unexpected."""
    from dataclasses import replace

    from shadowtutor.protocol.errors import ProtocolError
    from shadowtutor.protocol.telemetry import check_telemetry

    asked = replace(target, telemetry=asks)
    seen = set()
    for i in range(60):
        case = make_case(9, i, asked, ("telemetry",))
        valid = True
        for step in case.steps:
            try:
                check_telemetry(decode(step.data))
            except ProtocolError:
                valid = False
        seen.add(valid)
        if not asks:
            assert (case.expect.end, case.expect.require) == (CLOSE, "unexpected_message"), case.variant
        elif valid:
            assert case.expect.end == CONTINUE and case.expect.codes == frozenset(), case.variant
        else:
            assert (case.expect.end, case.expect.require) == (CLOSE, "bad_message"), case.variant
    assert seen == {True, False}


def test_bad_stream_cases_offer_h264_and_keep_seq_order(target: Target) -> None:
    """The key frames of one case go in seq order: a case must break the stream, not the seq rule."""
    for i in range(40):
        case = make_case(5, i, target, ("bad_stream",))
        assert decode(case.hello).frame_codecs == ["h264"]  # type: ignore[arg-type, attr-defined]
        seqs = [decode(step.data).seq for step in case.steps]  # type: ignore[attr-defined]
        assert seqs == sorted(set(seqs)) and all(decode(s.data).codec == "h264" for s in case.steps)  # type: ignore


@pytest.mark.parametrize("seed", [1, 7, 11, 2026, random.SystemRandom().randrange(2**32)])
def test_every_refused_hello_gets_the_error_the_servers_own_check_gives(seed: int, target: Target) -> None:
    """The server's HELLO check (services.server.connections.handshake) is the oracle: a case naming a codec the
    server knows cannot expect ``unsupported_codec``, whatever the seed (the random one is printed)."""
    settings = ServerSettings(max_frame_width=1920, max_frame_height=1080)
    seen = set()
    for index in range(200):
        case = make_case(seed, index, target, ("hello_fields",))
        seen.add(case.variant)
        try:
            check_hello(decode(case.hello or case.steps[0].data), settings, CLASSES)
            got = None
        except ProtocolError as exc:
            got = exc.code.value
        assert case.expect.require == got, f"seed {seed}, case {index} ({case.variant})"
    assert "unknown frame codec" in seen


def test_an_unknown_codec_is_never_one_the_registry_knows() -> None:
    assert unknown_codec(FRAME_CODECS) not in FRAME_CODECS
    assert unknown_codec(("h264",)) == "h265"
    assert unknown_codec(CODEC_NAMES) == "x-0"
    assert unknown_codec((*CODEC_NAMES, "x-0")) == "x-1"


def test_the_many_references_stream_asks_for_more_than_the_servers_cap(target: Target) -> None:
    unit = x264_units([target.frames[0]], MANY_REFERENCES)[0]
    assert sequence_parameters(unit)[0].max_num_ref_frames == MANY_REFERENCES > MAX_REF_FRAMES
    with pytest.raises(ProtocolError, match="reference frames") as info:
        StreamDecoder(target.width, target.height).decode(unit, 0)
    assert info.value.code is ErrorCode.BAD_FRAME
