"""Fuzz cases: what to send to a live server and what the protocol says must come back.

A case is an optional valid HELLO (the session), a few steps (messages, text frames, an
abrupt disconnect) and an :class:`Expect`. :func:`make_case` builds case ``index`` of a run
from ``seed`` alone (categories in turn, variants drawn from ``random.Random``), so a run is
repeatable: the same seed and target give the same cases in the same order.
"""

from __future__ import annotations

import random
import struct
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import numpy as np

from shadowtutor.protocol.codecs import FRAME_CODECS, encode_frame
from shadowtutor.protocol.image_header import PNG_SIGNATURE
from shadowtutor.protocol.messages import (
    MAX_HELLO_BYTES,
    Error,
    Hello,
    KeyFrame,
    Labels,
    ResyncRequest,
    Telemetry,
    Update,
    Welcome,
    decode,
    encode,
)
from shadowtutor.protocol.telemetry import LABELS, OPTIONAL_COUNTS, STUDENT_LAYERS
from shadowtutor.protocol.video_stream import StreamEncoder, StreamFrame
from shadowtutor_lab.stress.decoder_memory import x264_units
from shadowtutor_lab.stress.fuzz_mutate import mutate_bytes, mutate_header, pack, pack_raw

# The probe that ends a case: a RESYNC_REQUEST with this version (its answer is the full UPDATE
# with this base_version), or in naive mode a KEY_FRAME with this seq (answered by its LABELS).
PROBE_VERSION = 7_777_777_777
PROBE_SEQ = 2**53
# Error codes the server sends about one KEY_FRAME without ending the session (docs/protocol.md, "Session").
KEY_FRAME_ERRORS = frozenset({"bad_frame", "unsupported_codec", "rate_limited", "teacher_failed"})
BOMB_BYTES = 128 * 2**20  # what the zlib-bomb PNG inflates to
# reference frames a stream asks the server's decoder to keep (over its cap)
MANY_REFERENCES = 16
HUGE_SIDE = 60_000  # a side no server accepts (the declared size of header bombs)

CLOSE, CONTINUE, ANY, DROP = "close", "continue", "any", "drop"
# names of real image and video formats, for cases offering a codec the server does not know
CODEC_NAMES = ("h264", "h265", "hevc", "vp8", "vp9", "av1", "mjpeg", "jpeg2000", "gif", "bmp", "tiff", "avif")


@dataclass(frozen=True)
class Send:
    """One WebSocket message: binary, or a text frame when ``data`` is a str."""

    data: bytes | str


@dataclass(frozen=True)
class Drop:
    """End the connection abruptly (no close frame) after ``after`` seconds, first writing ``partial``:
    the start of a binary WebSocket frame that promises more bytes than follow."""

    after: float = 0.0
    partial: bytes = b""


Step = Send | Drop


@dataclass(frozen=True)
class Expect:
    """What the protocol requires after the steps.

    ``end``: CLOSE (a fatal ERROR and the close), CONTINUE (the session goes on: the probe is
    answered), ANY (any documented outcome) or DROP (the fuzzer hangs up; only health counts).
    ``codes``: the error codes that may come (None: any documented code); ``require``: one that
    must; ``close_codes``: for CLOSE, the close codes allowed (None: the fatal ERROR's own);
    ``answers``: UPDATE/LABELS messages that must come besides the probe's.
    """

    end: str
    codes: frozenset[str] | None = None
    require: str | None = None
    close_codes: frozenset[int] | None = None
    answers: int = 0


@dataclass(frozen=True)
class FuzzCase:
    index: int
    category: str
    variant: str
    hello: bytes | None  # a valid HELLO opening the session; None: the steps come first
    steps: tuple[Step, ...]
    expect: Expect
    mode: str = "distill"  # the session's mode: which probe ends the case
    probe: bool = True  # False: only wait (for the HELLO timeout)


@dataclass(frozen=True)
class Target:
    """What a valid edge of this server sends: its classes, frame size, frames (frame ``i`` has index ``i``)."""

    class_names: tuple[str, ...]
    width: int
    height: int
    frames: tuple[np.ndarray, ...]
    max_message_bytes: int = 16 * 2**20
    token: str | None = None
    edge_id: str | None = None  # every case uses this id (a token is issued per edge id); None: fuzz-SEED-N
    telemetry: bool = True  # the server asks for TELEMETRY in WELCOME (its default edge_report_interval)
    _encoded: dict[tuple[str, int], bytes] = field(default_factory=dict, init=False, compare=False, repr=False)
    _streams: dict[str, tuple[StreamFrame, ...]] = field(default_factory=dict, init=False, compare=False,
                                                          repr=False)

    def __post_init__(self) -> None:
        if not self.frames:
            raise ValueError("a fuzz target needs at least one valid frame")
        for frame in self.frames:
            if frame.shape != (self.height, self.width, 3) or frame.dtype != np.uint8:
                raise ValueError(f"frames must be uint8 {self.height}x{self.width}x3, got {frame.dtype} {frame.shape}")

    def frame_bytes(self, codec: str, i: int = 0) -> bytes:
        key = (codec, i % len(self.frames))
        if key not in self._encoded:
            self._encoded[key] = encode_frame(self.frames[key[1]], codec)
        return self._encoded[key]

    def hello_header(self, edge_id: str, /, **changes: Any) -> dict[str, Any]:
        hello = Hello(edge_id=edge_id, class_names=list(self.class_names), frame_width=self.width,
                      frame_height=self.height, frame_codecs=["jpeg", "png", "webp", "raw"],
                      weight_codecs=["f16+zstd", "f32"], token=self.token, agent="shadowtutor-fuzz")
        return {**hello.header(), **changes}

    def hello(self, edge_id: str, /, **changes: Any) -> bytes:
        return pack(Hello.TYPE, self.hello_header(edge_id, **changes))

    def stream(self) -> tuple[StreamFrame, ...]:
        """The target's frames as one H.264 stream; ValueError when a side is odd (H.264 needs even ones)."""
        if "h264" not in self._streams:
            encoder = StreamEncoder(self.width, self.height)
            self._streams["h264"] = tuple(encoder.encode(f) for f in self.frames)
        return self._streams["h264"]

    def stream_frame(self, seq: int, frame: StreamFrame | None = None, *, payload: bytes | None = None,
                     **changes: Any) -> bytes:
        """An h264 KEY_FRAME: ``frame`` of :meth:`stream` (default its intra frame), ``payload`` replacing its bytes."""
        frame = frame or self.stream()[0]
        return self.key_frame(seq, "h264", frame=frame.position, payload=frame.payload if payload is None else payload,
                              **{"stream_position": frame.position, **changes})

    def key_frame(self, seq: int, codec: str = "raw", *, frame: int = 0, payload: bytes | None = None,
                  **changes: Any) -> bytes:
        header = {**KeyFrame(seq=seq, frame_index=frame % len(self.frames), base_version=0, codec=codec,
                             width=self.width, height=self.height).header(), **changes}
        return pack(KeyFrame.TYPE, header, self.frame_bytes(codec, frame) if payload is None else payload)


def resync(have_version: Any) -> bytes:
    return pack(ResyncRequest.TYPE, {"have_version": have_version, "reason": "fuzz"})


def telemetry_header(rng: random.Random) -> dict[str, Any]:
    """A valid TELEMETRY header with random figures."""
    def histogram() -> dict[str, Any]:
        bounds = sorted({round(rng.uniform(0.001, 10.0), 4) for _ in range(rng.randint(1, 12))})
        return {"buckets": bounds, "counts": [rng.randrange(1000) for _ in range(len(bounds) + 1)],
                "sum": rng.uniform(0, 1e4)}

    def keyed(keys: tuple[str, ...], value: Callable[[], Any]) -> dict[str, Any] | None:
        """None (the feature off, or an edge that predates the field), or some of ``keys`` with values."""
        return rng.choice((None, {key: value() for key in rng.sample(keys, rng.randint(0, len(keys)))}))

    counts = {name: rng.randrange(2**40) for name in ("frames", "key_frames", "updates_applied", "resyncs",
                                                       "reconnects", "bytes_sent", "bytes_received")}
    optional = {name: rng.choice((None, rng.randrange(2**20))) for name in OPTIONAL_COUNTS}
    labelled = {name: keyed(keys, lambda: rng.randrange(2**40)) for name, keys in LABELS.items()}
    return Telemetry(**counts, waited_seconds=rng.uniform(0, 1e5), stride=rng.choice((None, rng.randint(1, 64))),
                     student_metric=rng.choice((None, rng.random())), weights_version=rng.choice((None, 3)),
                     seconds_since_update=rng.choice((None, rng.uniform(0, 100))), inference_seconds=histogram(),
                     blocked_seconds=rng.choice((None, histogram())), roundtrip_seconds=histogram(),
                     region_key_age_frames=rng.choice((None, histogram())), **optional, **labelled,
                     changed_fraction=keyed(STUDENT_LAYERS, rng.random)).header()


def probe_message(mode: str, target: Target) -> bytes:
    return resync(PROBE_VERSION) if mode == "distill" else target.key_frame(PROBE_SEQ)


class _Builder:
    """The context of one case's generator: its random source, the target and the case's edge id."""

    def __init__(self, rng: random.Random, target: Target, edge_id: str) -> None:
        self.rng = rng
        self.target = target
        self.edge_id = edge_id

    def hello(self, **changes: Any) -> bytes:
        return self.target.hello(self.edge_id, **changes)

    def valid_messages(self) -> dict[str, bytes]:
        """Valid in-session edge messages, by name."""
        codec = self.rng.choice(("raw", "jpeg", "png", "webp"))
        return {f"KEY_FRAME {codec}": self.target.key_frame(0, codec, frame=self.rng.randrange(8)),
                "RESYNC_REQUEST": resync(0), "ERROR": encode(Error(code="bad_frame", message="fuzz")),
                "TELEMETRY": pack(Telemetry.TYPE, telemetry_header(self.rng))}


Generated = tuple[str, bytes | None, tuple[Step, ...], Expect]


def _random_bytes(b: _Builder) -> Generated:
    rng = b.rng
    data = rng.randbytes(rng.choice((0, 1, 7, 8, 9, 64, 1000, rng.randint(0, 4096))))
    if rng.random() < 0.5:  # past the magic: a version and a type, then noise
        data = b"ST" + bytes([rng.choice((1, 1, 1, rng.randrange(256))), rng.randrange(9)]) + data
        return "magic + random bytes", None, (Send(data),), Expect(ANY)
    return f"{len(data)} random bytes", None, (Send(data),), Expect(
        CLOSE, frozenset({"bad_message", "unsupported_version", "unexpected_message"}))


def _mutated_hello(b: _Builder) -> Generated:
    name, data = mutate_bytes(b.hello(), b.rng)
    return f"HELLO: {name}", None, (Send(data),), Expect(ANY)


def _mutated_message(b: _Builder) -> Generated:
    base, message = b.rng.choice(sorted(b.valid_messages().items()))
    name, data = mutate_bytes(message, b.rng)
    return f"{base}: {name}", b.hello(), (Send(data),), Expect(ANY)


def _header_fields(b: _Builder) -> Generated:
    rng = b.rng
    if rng.random() < 0.1:  # JSON that parses only with unbounded recursion: refused as such, not a crash
        depth = rng.choice((2_000, 10_000, 30_000))
        nested = (b'{"edge_id":' if rng.random() < 0.5 else b"[") * depth
        message = pack_raw(Hello.TYPE, nested)
        if len(message) > MAX_HELLO_BYTES:  # larger than any HELLO: refused unread, as oversize
            expect = Expect(CLOSE, frozenset({"too_large"}), close_codes=frozenset({1009, 1006}))
        else:
            expect = Expect(CLOSE, frozenset({"bad_message"}), require="bad_message")
        return f"header nested {depth} deep", None, (Send(message),), expect
    if rng.random() < 0.4:
        name, header = mutate_header(b.target.hello_header(b.edge_id), rng)
        return f"HELLO {name}", None, (Send(pack(Hello.TYPE, header)),), Expect(ANY)
    kind = rng.choice(("KEY_FRAME", "RESYNC_REQUEST", "ERROR", "TELEMETRY"))
    headers = {"KEY_FRAME": (KeyFrame.TYPE, KeyFrame(seq=0, frame_index=0, base_version=0, codec="raw",
                                                    width=b.target.width, height=b.target.height).header()),
               "RESYNC_REQUEST": (ResyncRequest.TYPE, {"have_version": 0, "reason": ""}),
               "ERROR": (Error.TYPE, Error(code="bad_frame", message="fuzz").header()),
               "TELEMETRY": (Telemetry.TYPE, telemetry_header(rng))}
    type_id, header = headers[kind]
    name, header = mutate_header(header, rng)
    payload = b.target.frame_bytes("raw") if kind == "KEY_FRAME" else b""
    return f"{kind} {name}", b.hello(), (Send(pack(type_id, header, payload)),), Expect(ANY)


def unknown_codec(known: tuple[str, ...]) -> str:
    """A codec name the server does not know: the first real format's name the registry ``known``
    lacks, or a made-up one when it has them all (no draw, so a seed's cases stay what they were)."""
    unknown = (name for name in (*CODEC_NAMES, *(f"x-{i}" for i in range(len(known) + 1))) if name not in known)
    return next(unknown)


def _hello_fields(b: _Builder) -> Generated:
    """HELLOs that are well-formed but refused, each with its documented error."""
    t = b.target
    variants: dict[str, tuple[dict[str, Any], str]] = {
        "empty edge_id": ({"edge_id": ""}, "bad_message"),
        "edge_id of 129 characters": ({"edge_id": "e" * 129}, "bad_message"),
        "edge_id with a control character": ({"edge_id": "cam\n1"}, "bad_message"),
        "unknown mode": ({"mode": "turbo"}, "bad_message"),
        "unknown student_arch": ({"student_arch": "resnet-152"}, "incompatible_model"),
        "class_names reversed": ({"class_names": list(reversed(t.class_names))}, "incompatible_model"),
        "class_names with an extra class": ({"class_names": [*t.class_names, "zebra"]}, "incompatible_model"),
        "no class_names": ({"class_names": []}, "incompatible_model"),
        "frame_width 0": ({"frame_width": 0}, "bad_frame"),
        "frame_height -1": ({"frame_height": -1}, "bad_frame"),
        f"frame {HUGE_SIDE}x{HUGE_SIDE}": ({"frame_width": HUGE_SIDE, "frame_height": HUGE_SIDE}, "bad_frame"),
        "frame_width 2**64": ({"frame_width": 2**64}, "bad_frame"),
        "no frame codecs": ({"frame_codecs": []}, "unsupported_codec"),
        "unknown frame codec": ({"frame_codecs": [unknown_codec(FRAME_CODECS)]}, "unsupported_codec"),
        "no weight codecs": ({"weight_codecs": []}, "unsupported_codec"),
        "delta weight codec alone": ({"weight_codecs": ["q8delta+zstd"]}, "unsupported_codec"),
        "sparse weight codecs alone": ({"weight_codecs": ["q4sparse+zstd", "q8sparse+zstd"]}, "unsupported_codec"),
    }
    name = b.rng.choice(sorted(variants))
    changes, code = variants[name]
    if "edge_id" in changes and t.token is not None:  # the token is checked first: it is not this edge id's
        code = "unauthorized"
    return name, None, (Send(b.hello(**changes)),), Expect(CLOSE, frozenset({code}), require=code)


def _wrong_version(b: _Builder) -> Generated:
    rng = b.rng
    version = rng.choice((0, 2, 255, rng.randrange(2, 256)))
    expect = Expect(CLOSE, frozenset({"unsupported_version"}), require="unsupported_version")
    if rng.random() < 0.5:
        hello = pack(Hello.TYPE, b.target.hello_header(b.edge_id), version=version)
        return f"HELLO in version {version}", None, (Send(hello),), expect
    base, message = rng.choice(sorted(b.valid_messages().items()))
    return f"{base} in version {version}", b.hello(), (Send(message[:2] + bytes([version]) + message[3:]),), expect


def _before_hello(b: _Builder) -> Generated:
    t, rng = b.target, b.rng
    messages = {**b.valid_messages(),
                "ERROR (fatal)": encode(Error(code="internal", message="fuzz", fatal=True)),
                "UPDATE": encode(Update(seq=0, base_version=0, version=1, metric=0.5, initial_metric=0.1, steps=1,
                                        full=False, tensors=[])),
                "LABELS": encode(Labels(seq=0, frame_index=0, codec="raw", width=t.width, height=t.height,
                                        payload=bytes(t.width * t.height)))}
    expect = Expect(CLOSE, frozenset({"unexpected_message"}), require="unexpected_message")
    if rng.random() < 0.1:
        return "nothing sent (HELLO timeout)", None, (), expect
    name = rng.choice(sorted(messages))
    return f"{name} first", None, (Send(messages[name]),), expect


def _second_hello(b: _Builder) -> Generated:
    other = b.rng.random() < 0.5
    hello = b.target.hello(f"{b.edge_id}-other") if other else b.hello()
    return ("HELLO of another edge id" if other else "the same HELLO again"), b.hello(), (Send(hello),), Expect(
        CLOSE, frozenset({"unexpected_message"}), require="unexpected_message")


def _seq_order(b: _Builder) -> Generated:
    rng, t = b.rng, b.target
    pairs = {"duplicate seq": (3, 3), "seq going back": (5, 2), "seq 2**62 then 0": (2**62, 0),
             "negative seq after 0": (0, -1)}
    if rng.random() < 0.25:  # allowed: any strictly increasing seqs, gaps and negative numbers included
        first, second = rng.choice(((-5, 10**12), (-(2**63), 2**63), (0, 1)))
        steps = (Send(t.key_frame(first)), Send(t.key_frame(second, frame=1)))
        return f"seq {first} then {second}", b.hello(), steps, Expect(CONTINUE, KEY_FRAME_ERRORS, answers=2)
    name = rng.choice(sorted(pairs))
    first, second = pairs[name]
    return name, b.hello(), (Send(t.key_frame(first)), Send(t.key_frame(second, frame=1))), Expect(
        CLOSE, frozenset({"bad_message"}), require="bad_message")


def _wrong_direction(b: _Builder) -> Generated:
    t = b.target
    messages = {
        "WELCOME": encode(Welcome(session_id="0" * 32, version=0, frame_codec="raw", weight_codec="f32",
                                  params={}, class_names=list(t.class_names))),
        "UPDATE": encode(Update(seq=0, base_version=0, version=1, metric=0.5, initial_metric=0.1, steps=1,
                                full=True, tensors=[{"name": "x", "shape": [1]}], payload=bytes(4))),
        "LABELS": encode(Labels(seq=0, frame_index=0, codec="raw", width=t.width, height=t.height,
                                payload=bytes(t.width * t.height))),
    }
    name = b.rng.choice(sorted(messages))
    return f"{name} from the edge", b.hello(), (Send(messages[name]),), Expect(
        CLOSE, frozenset({"unexpected_message"}), require="unexpected_message")


def _bad_key_frame(b: _Builder) -> Generated:
    rng, t = b.rng, b.target
    w, h = t.width, t.height
    image_codec = rng.choice(("jpeg", "png", "webp"))
    image = t.frame_bytes(image_codec)
    raw = t.frame_bytes("raw")
    bad = Expect(CONTINUE, KEY_FRAME_ERRORS, require="bad_frame")
    maybe = Expect(CONTINUE, KEY_FRAME_ERRORS)  # may still decode (a truncated JPEG does)
    variants: dict[str, tuple[bytes, Expect]] = {
        "header width + 1": (t.key_frame(0, width=w + 1), bad),
        "header size swapped": (t.key_frame(0, width=h, height=w), bad) if w != h else (t.key_frame(0, width=0), bad),
        "raw payload one byte short": (t.key_frame(0, payload=raw[:-1]), bad),
        "raw payload one byte long": (t.key_frame(0, payload=raw + b"\0"), bad),
        "empty payload": (t.key_frame(0, image_codec, payload=b""), bad),
        f"{image_codec} truncated": (t.key_frame(0, image_codec, payload=image[: rng.randrange(len(image))]), maybe),
        f"{image_codec} payload damaged": (t.key_frame(0, image_codec, payload=mutate_bytes(image, rng)[1]), maybe),
        f"{image_codec} image of twice the size": (
            t.key_frame(0, image_codec, payload=encode_frame(np.tile(t.frames[0], (2, 2, 1)), image_codec)), bad),
        "png bytes sent as jpeg": (t.key_frame(0, "jpeg", payload=t.frame_bytes("png")), bad),
        f"png declaring {HUGE_SIDE}x{HUGE_SIDE}": (t.key_frame(0, "png", payload=_png_declaring(HUGE_SIDE, HUGE_SIDE)),
                                                   bad),
        f"jpeg declaring {HUGE_SIDE}x{HUGE_SIDE}": (
            t.key_frame(0, "jpeg", payload=_jpeg_declaring(t.frame_bytes("jpeg"), HUGE_SIDE, HUGE_SIDE)), bad),
        f"png inflating to {BOMB_BYTES >> 20} MiB": (t.key_frame(0, "png", payload=_png_bomb(w, h)), maybe),
        "frame_index the teacher has no label for": (
            t.key_frame(0, frame_index=rng.choice((-1, len(t.frames) + 10**6, 2**63, 10**300))), maybe),
        "unknown codec": (t.key_frame(0, rng.choice(("h265", "", "RAW")), payload=raw),
                          Expect(CONTINUE, KEY_FRAME_ERRORS, require="unsupported_codec")),
    }
    name = rng.choice(sorted(variants))
    data, expect = variants[name]
    return name, b.hello(), (Send(data),), expect


def _bad_stream(b: _Builder) -> Generated:
    """H.264 stream frames the server must refuse (or may decode) without losing the session."""
    rng, t = b.rng, b.target
    stream = t.stream()
    intra, inter = stream[0], stream[min(1, len(stream) - 1)]
    bad = Expect(CONTINUE, KEY_FRAME_ERRORS, require="bad_frame")
    maybe = Expect(CONTINUE, KEY_FRAME_ERRORS)
    big = StreamEncoder(2 * t.width, 2 * t.height).encode(np.tile(t.frames[0], (2, 2, 1)))
    variants: dict[str, tuple[tuple[bytes, ...], Expect]] = {
        "inter frame without its intra frame": ((t.stream_frame(0, inter),), bad),
        "inter frame posing as intra": ((t.stream_frame(0, payload=inter.payload),), bad),
        "no stream_position": ((t.stream_frame(0, stream_position=None),), bad),
        "negative stream_position": ((t.stream_frame(0, stream_position=-rng.randint(1, 2**40)),), bad),
        "stream position skipped": ((t.stream_frame(0, intra), t.stream_frame(1, inter, stream_position=2)), bad),
        "intra frame twice the size": ((t.stream_frame(0, big),), bad),
        "random bytes as intra": ((t.stream_frame(0, payload=rng.randbytes(rng.randint(0, 2000))),), bad),
        f"intra asking for {MANY_REFERENCES} reference frames": (
            (t.stream_frame(0, payload=x264_units([t.frames[0]], MANY_REFERENCES)[0]),), bad),
        "intra truncated": ((t.stream_frame(0, payload=intra.payload[: rng.randrange(len(intra.payload))]),), maybe),
        "intra damaged": ((t.stream_frame(0, payload=mutate_bytes(intra.payload, rng)[1]),), maybe),
        "inter damaged": ((t.stream_frame(0, intra), t.stream_frame(1, inter,
                                                                   payload=mutate_bytes(inter.payload, rng)[1])),
                          maybe),
    }
    name = rng.choice(sorted(variants))
    messages, expect = variants[name]
    return name, b.hello(frame_codecs=["h264"]), tuple(Send(m) for m in messages), expect


def _oversize(b: _Builder) -> Generated:
    rng, t = b.rng, b.target
    size = t.max_message_bytes + rng.choice((1, 4096, t.max_message_bytes // 2))
    # 1009; or no close frame at all: the server closes while the rest of the message is still arriving,
    # so TCP resets the connection and the close frame can be lost on the way (RFC 6455 7.1.1, 1006).
    expect = Expect(CLOSE, frozenset({"too_large"}), close_codes=frozenset({1009, 1006}))
    if rng.random() < 0.25:  # before HELLO the limit is the largest HELLO
        size = MAX_HELLO_BYTES + rng.choice((1, 4096, t.max_message_bytes // 2))
        return f"{size} bytes before HELLO (over the largest HELLO)", None, (
            Send(rng.randbytes(64) + bytes(size - 64)),), expect
    if rng.random() < 0.5:
        return f"{size} bytes before HELLO", None, (Send(rng.randbytes(64) + bytes(size - 64)),), expect
    payload = bytes(size)
    return f"KEY_FRAME of {size} bytes", b.hello(), (Send(t.key_frame(0, payload=payload)),), expect


def _text_frame(b: _Builder) -> Generated:
    rng = b.rng
    texts = {"random text": "".join(chr(rng.randrange(32, 0x2FFF)) for _ in range(rng.randint(0, 300))),
             "JSON text": '{"edge_id": "x", "class_names": []}', "empty text": "",
             "a HELLO as text": b.hello().decode("latin-1")}
    name = rng.choice(sorted(texts))
    expect = Expect(CLOSE, frozenset({"bad_message"}), require="bad_message")
    if rng.random() < 0.5:
        return f"{name} before HELLO", None, (Send(texts[name]),), expect
    return f"{name} in a session", b.hello(), (Send(texts[name]),), expect


def _disconnect(b: _Builder) -> Generated:
    rng, t = b.rng, b.target
    key_frame = t.key_frame(0, rng.choice(("raw", "jpeg")))
    half = _client_frame(key_frame)[: len(key_frame) // 2]
    variants: dict[str, tuple[bytes | None, tuple[Step, ...]]] = {
        "right after connecting": (None, (Drop(),)),
        "half a HELLO frame": (None, (Drop(partial=_client_frame(b.hello())[:20]),)),
        "half a KEY_FRAME frame": (b.hello(), (Drop(partial=half),)),
        "after a KEY_FRAME, while the server works": (
            b.hello(), (Send(key_frame), Drop(after=round(rng.uniform(0.0, 0.3), 3)))),
        "after a RESYNC_REQUEST": (b.hello(), (Send(resync(0)), Drop())),
        "frame header only": (b.hello(), (Drop(partial=_client_frame(key_frame)[:2]),)),
    }
    name = rng.choice(sorted(variants))
    hello, steps = variants[name]
    return name, hello, steps, Expect(DROP)


def _resync(b: _Builder) -> Generated:
    rng, t = b.rng, b.target
    if rng.random() < 0.15:
        return "RESYNC_REQUEST in a naive session", b.hello(mode="naive"), (Send(resync(0)),), Expect(
            CLOSE, frozenset({"unexpected_message"}), require="unexpected_message")
    if rng.random() < 0.15:
        value = rng.choice((1e308, 1.5, "1", None, True))
        return f"have_version {value!r}", b.hello(), (Send(resync(value)),), Expect(
            CLOSE, frozenset({"bad_message"}), require="bad_message")
    version = rng.choice((-1, 0, 1, -(2**63), 2**63 - 1, 2**64, 10**40, -(10**40)))
    if rng.random() < 0.3:  # a key frame claiming an absurd base version: answered by a full update
        return f"KEY_FRAME base_version {version}", b.hello(), (Send(t.key_frame(0, base_version=version)),), \
            Expect(CONTINUE, KEY_FRAME_ERRORS, answers=1)
    count = rng.choice((1, 1, 3))
    return f"{count} x have_version {version}", b.hello(), tuple(Send(resync(version)) for _ in range(count)), \
        Expect(CONTINUE, frozenset(), answers=count)


def _edge_error(b: _Builder) -> Generated:
    rng = b.rng
    code = rng.choice(("bad_frame", "internal", "made_up_code", ""))
    text = rng.choice(("fuzz", "", "\u00e9\U0001f600" * 50, "x" * 10_000))
    seq = rng.choice((None, 0, -1, 2**70))
    if rng.random() < 0.3:
        error = encode(Error(code=code, message=text, fatal=True, seq=seq))
        return f"fatal ERROR {code!r} from the edge", b.hello(), (Send(error),), Expect(
            CLOSE, frozenset(), close_codes=frozenset({1000}))
    error = encode(Error(code=code, message=text, fatal=False, seq=seq))
    return f"ERROR {code!r} from the edge", b.hello(), (Send(error),), Expect(CONTINUE, frozenset())


def _telemetry(b: _Builder) -> Generated:
    """TELEMETRY reports: valid ones keep the session (no answer), impossible figures are bad_message;
    a server that asked for none (WELCOME without telemetry_interval) ends the session either way."""
    rng = b.rng
    header = telemetry_header(rng)
    histogram = header["inference_seconds"]
    invalid: dict[str, dict[str, Any]] = {
        "negative frames": {"frames": -1},
        "bytes_sent 2**63": {"bytes_sent": 2**63},
        "student_metric 1.5": {"student_metric": 1.5},
        "stride 0": {"stride": 0},
        "waited_seconds Infinity": {"waited_seconds": float("inf")},
        "histogram without counts": {"inference_seconds": {"buckets": histogram["buckets"], "sum": 1.0}},
        "histogram with a count too few": {"inference_seconds": {**histogram, "counts": histogram["counts"][:-1]}},
        "histogram bounds going down": {"roundtrip_seconds": {"buckets": [2.0, 1.0], "counts": [0, 0, 0], "sum": 0}},
        "histogram of 33 bounds": {"roundtrip_seconds": {"buckets": list(range(1, 34)), "counts": [0] * 34, "sum": 0}},
        "histogram sum Infinity": {"blocked_seconds": {**histogram, "sum": float("inf")}},
        "histogram as a list": {"blocked_seconds": [1, 2]},
        "negative key_frames_dropped": {"key_frames_dropped": -1},
        "cluster_workers 2**63": {"cluster_workers": 2**63},
        "output_dropped of an unknown output": {"output_dropped": {"thumbnails": 1}},
        "regions of an unknown path": {"regions": {"segment": 1, "warp": 1}},
        "change_based_frames negative": {"change_based_frames": {"change": -1}},
        "changed_fraction of an unknown layer": {"changed_fraction": {"conv99": 0.5}},
        "changed_fraction 1.5": {"changed_fraction": {"in_conv1": 1.5}},
        "regions as a list": {"regions": [1, 2]},
        "key-age histogram of no bounds": {"region_key_age_frames": {"buckets": [], "counts": [0], "sum": 0}},
    }
    refused = "bad_message" if b.target.telemetry else "unexpected_message"
    if rng.random() < 0.4:
        count, mode = rng.choice((1, 3)), rng.choice(("distill", "naive"))
        steps = tuple(Send(pack(Telemetry.TYPE, telemetry_header(rng))) for _ in range(count))
        expect = Expect(CONTINUE, frozenset()) if b.target.telemetry else Expect(
            CLOSE, frozenset({refused}), require=refused)
        return f"{count} valid report(s), {mode}", b.hello(mode=mode), steps, expect
    name = rng.choice(sorted(invalid))
    data = pack(Telemetry.TYPE, {**header, **invalid[name]})
    return name, b.hello(), (Send(data),), Expect(CLOSE, frozenset({refused}), require=refused)


def _auth(b: _Builder) -> Generated:
    """HELLOs whose token the server must refuse (``unauthorized``, close 1008) before any model data.

    Only a target that knows its own valid token (a server with tokens) can say what must be
    refused; against any other server these HELLOs may be admitted, and any documented answer is right.
    """
    t, rng = b.target, b.rng
    made_up = "".join(rng.choice("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_") for _ in range(43))
    if t.token is None:
        return "a made-up token (the server's tokens are unknown)", None, (Send(b.hello(token=made_up)),), Expect(ANY)
    flipped = t.token[:-1] + ("A" if t.token[-1] != "A" else "B")
    variants: dict[str, bytes] = {
        "no token": b.hello(token=None),
        "empty token": b.hello(token=""),
        "a made-up token": b.hello(token=made_up),
        "the token with its last character changed": b.hello(token=flipped),
        "the token with a character added": b.hello(token=t.token + rng.choice("A0-_")),
        "the token cut short": b.hello(token=t.token[: rng.randrange(len(t.token))]),
        "a token of 513 characters": b.hello(token=(t.token * 20)[:513]),
        "the token under another edge id": t.hello(f"{b.edge_id}-other"),
    }
    name = rng.choice(sorted(variants))
    return name, None, (Send(variants[name]),), Expect(CLOSE, frozenset({"unauthorized"}), require="unauthorized")


def _valid(b: _Builder) -> Generated:
    rng, t = b.rng, b.target
    codec = rng.choice(("raw", "jpeg", "png", "webp"))
    first = rng.randrange(len(t.frames))
    frames = tuple(Send(t.key_frame(seq, codec, frame=first + seq)) for seq in range(rng.randint(1, 2)))
    mode = rng.choice(("distill", "distill", "naive"))
    return f"{len(frames)} {codec} key frame(s), {mode}", b.hello(mode=mode), frames, Expect(
        CONTINUE, KEY_FRAME_ERRORS - {"bad_frame", "unsupported_codec"}, answers=len(frames))


CATEGORIES: dict[str, Callable[[_Builder], Generated]] = {
    "random_bytes": _random_bytes,
    "mutated_hello": _mutated_hello,
    "mutated_message": _mutated_message,
    "header_fields": _header_fields,
    "hello_fields": _hello_fields,
    "wrong_version": _wrong_version,
    "before_hello": _before_hello,
    "second_hello": _second_hello,
    "seq_order": _seq_order,
    "wrong_direction": _wrong_direction,
    "bad_key_frame": _bad_key_frame,
    "bad_stream": _bad_stream,
    "oversize": _oversize,
    "text_frame": _text_frame,
    "disconnect": _disconnect,
    "resync": _resync,
    "edge_error": _edge_error,
    "telemetry": _telemetry,
    "auth": _auth,
    "valid": _valid,
}


def make_case(seed: int, index: int, target: Target, categories: tuple[str, ...] = tuple(CATEGORIES)) -> FuzzCase:
    """Case ``index`` of the run with ``seed``: category ``index mod len(categories)``, variant by the seed."""
    if not categories:
        raise ValueError("no fuzz categories selected")
    category = categories[index % len(categories)]
    rng = random.Random(f"{seed}/{index}")
    edge_id = target.edge_id or f"fuzz-{seed}-{index}"
    variant, hello, steps, expect = CATEGORIES[category](_Builder(rng, target, edge_id))
    mode = "distill" if hello is None else decode(hello).mode  # type: ignore[attr-defined]
    return FuzzCase(index, category, variant, hello, steps, expect, mode, probe=bool(steps))


# -- crafted payloads --------------------------------------------------------------------------


def _client_frame(data: bytes) -> bytes:
    """``data`` as one masked binary WebSocket frame from a client (RFC 6455 section 5.2; mask 0)."""
    n = len(data)
    if n < 126:
        length = bytes([0x80 | n])
    elif n < 2**16:
        length = bytes([0x80 | 126]) + struct.pack(">H", n)
    else:
        length = bytes([0x80 | 127]) + struct.pack(">Q", n)
    return b"\x82" + length + bytes(4) + data  # a zero mask leaves the data as it is


def _png_chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


def _png(width: int, height: int, idat: bytes) -> bytes:
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)  # 8-bit RGB
    return PNG_SIGNATURE + _png_chunk(b"IHDR", header) + _png_chunk(b"IDAT", idat) + _png_chunk(b"IEND", b"")


def _png_declaring(width: int, height: int) -> bytes:
    """A small, well-formed PNG whose header declares ``width`` x ``height`` (a header bomb)."""
    return _png(width, height, zlib.compress(bytes(1024)))


@lru_cache(maxsize=4)
def _png_bomb(width: int, height: int) -> bytes:
    """A PNG of the right size whose image data inflates to :data:`BOMB_BYTES` (far more than it needs)."""
    return _png(width, height, zlib.compress(bytes(BOMB_BYTES), 9))


def _jpeg_declaring(jpeg: bytes, width: int, height: int) -> bytes:
    """``jpeg`` with its start-of-frame segment rewritten to declare ``width`` x ``height``."""
    pos = 2
    while pos + 4 <= len(jpeg):
        marker, length = jpeg[pos + 1], struct.unpack(">H", jpeg[pos + 2:pos + 4])[0]
        if marker in (0xC0, 0xC1, 0xC2):
            at = pos + 5  # marker (2), length (2), precision (1), then height and width
            return jpeg[:at] + struct.pack(">HH", height, width) + jpeg[at + 4:]
        pos += 2 + length
    raise ValueError("no start-of-frame segment in the JPEG")
