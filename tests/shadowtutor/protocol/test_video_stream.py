"""Frames as one H.264 stream: the real libx264 encoder and FFmpeg decoder on small frames."""

from __future__ import annotations

import subprocess
import sys
from fractions import Fraction

import av
import numpy as np
import pytest

from shadowtutor.protocol.errors import ErrorCode, ProtocolError
from shadowtutor.protocol.h264_sps import sequence_parameters
from shadowtutor.protocol.video_stream import (
    MAX_REF_FRAMES,
    StreamDecoder,
    StreamEncoder,
    StreamFrame,
    scaled_frame_size,
    stream_rate,
)

W, H = 96, 64


def frames(count: int, width: int = W, height: int = H) -> list[np.ndarray]:
    """A bright square moving over a gradient: an inter-coder's easy case."""
    ys, xs = np.mgrid[0:height, 0:width]
    base = np.stack([xs * 2, ys * 3, (xs + ys)], axis=-1).astype(np.uint8)
    out = []
    for i in range(count):
        frame = base.copy()
        frame[8:24, 4 + 3 * i:20 + 3 * i] = 250
        out.append(frame)
    return out


def close(a: np.ndarray, b: np.ndarray) -> bool:
    return float(np.abs(a.astype(int) - b.astype(int)).mean()) < 8.0


def refused(decoder: StreamDecoder, frame: StreamFrame, match: str) -> None:
    with pytest.raises(ProtocolError, match=match) as info:
        decoder.decode(frame.payload, frame.position)
    assert info.value.code is ErrorCode.BAD_FRAME
    assert decoder.last_position is None


@pytest.mark.parametrize(("width", "height"), [(64, 48), (160, 120)])
def test_a_stream_decodes_frame_by_frame_and_inter_frames_are_smaller(width: int, height: int) -> None:
    encoder, decoder = StreamEncoder(width, height), StreamDecoder(width, height)
    encoded = [encoder.encode(f) for f in frames(6, width, height)]
    assert [e.position for e in encoded] == list(range(6)) and encoded[0].intra and not encoded[1].intra
    assert max(len(e.payload) for e in encoded[1:]) < len(encoded[0].payload)
    for original, frame in zip(frames(6, width, height), encoded, strict=True):
        assert close(decoder.decode(frame.payload, frame.position), original)
    assert decoder.last_position == 5


def test_a_lost_frame_is_refused_until_the_encoder_restarts_with_an_intra_frame() -> None:
    encoder, decoder = StreamEncoder(W, H), StreamDecoder(W, H)
    source = frames(6)
    first, lost, after = (encoder.encode(f) for f in source[:3])
    decoder.decode(first.payload, first.position)
    refused(decoder, after, "inter frame at stream position 2 does not follow position 0")
    # still refused: the decoder waits for an intra frame, whatever follows
    refused(decoder, encoder.encode(source[3]), "does not follow no stream")
    encoder.restart()
    intra = encoder.encode(source[4])
    assert intra.intra and intra.position == 0
    assert close(decoder.decode(intra.payload, 0), source[4])
    nxt = encoder.encode(source[5])
    assert close(decoder.decode(nxt.payload, nxt.position), source[5])


def test_reordered_frames_are_refused() -> None:
    encoder, decoder = StreamEncoder(W, H), StreamDecoder(W, H)
    a, b, c = (encoder.encode(f) for f in frames(3))
    decoder.decode(a.payload, a.position)
    refused(decoder, c, "position 2 does not follow position 0")
    refused(decoder, b, "does not follow no stream")


def test_a_new_decoder_a_reconnect_takes_only_an_intra_frame() -> None:
    encoder = StreamEncoder(W, H)
    a, b = (encoder.encode(f) for f in frames(2))
    fresh = StreamDecoder(W, H)
    refused(fresh, b, "does not follow no stream")
    assert close(fresh.decode(a.payload, 0), frames(1)[0])


@pytest.mark.parametrize("payload", [b"", b"garbage", bytes(200), np.arange(600, dtype=np.uint8).tobytes()])
def test_malformed_access_units_are_refused(payload: bytes) -> None:
    refused(StreamDecoder(W, H), StreamFrame(payload, 0), "send an intra frame")


def test_an_inter_frame_posing_as_intra_and_a_wrong_size_are_refused() -> None:
    encoder = StreamEncoder(W, H)
    intra, inter = (encoder.encode(f) for f in frames(2))
    refused(StreamDecoder(W, H), StreamFrame(inter.payload, 0), "send an intra frame")
    refused(StreamDecoder(2 * W, H), intra, f"frame is {W}x{H}, expected {2 * W}x{H}")
    refused(StreamDecoder(W, H), StreamFrame(intra.payload, -1), "negative stream position")


def test_a_stream_of_larger_pictures_is_refused_before_they_are_decoded() -> None:
    big = StreamEncoder(8 * W, 8 * H).encode(np.zeros((8 * H, 8 * W, 3), np.uint8))
    refused(StreamDecoder(W, H), big, "undecodable H.264 access unit")
    smaller = StreamEncoder(W // 2, H // 2).encode(np.zeros((H // 2, W // 2, 3), np.uint8))
    refused(StreamDecoder(W, H), smaller, f"frame is {W // 2}x{H // 2}, expected {W}x{H}")


def test_the_encoder_takes_only_frames_of_its_even_size() -> None:
    with pytest.raises(ValueError, match="even"):
        StreamEncoder(95, 64)
    with pytest.raises(ValueError, match="stream is 96x64"):
        StreamEncoder(W, H).encode(np.zeros((48, 64, 3), np.uint8))
    with pytest.raises(ValueError, match="uint8"):
        StreamEncoder(W, H).encode(np.zeros((H, W, 3), np.float32))


def test_scaled_sizes_have_even_sides_and_scale_one_keeps_the_size() -> None:
    assert scaled_frame_size(1280, 720, 1.0) == (1280, 720)
    assert scaled_frame_size(1281, 721, 1.0) == (1281, 721)
    assert scaled_frame_size(1280, 720, 0.5) == (640, 360)
    assert scaled_frame_size(1280, 720, 2 / 3) == (854, 480)
    assert scaled_frame_size(4, 4, 0.01) == (2, 2)
    for scale in (0.0, -1.0, 1.01):
        with pytest.raises(ValueError, match="scale"):
            scaled_frame_size(1280, 720, scale)


def _x264_stream(width: int, height: int, refs: int, count: int) -> list[bytes]:
    """``count`` access units of libx264 asked to keep ``refs`` reference frames."""
    context = av.CodecContext.create("libx264", "w")
    context.width, context.height, context.pix_fmt = width, height, "yuv420p"
    context.time_base = Fraction(1, 1000)
    context.options = {"preset": "veryfast", "tune": "zerolatency", "refs": str(refs)}
    units = []
    for i in range(count):
        image = np.random.default_rng(i).integers(0, 255, (height, width, 3), dtype=np.uint8)
        frame = av.VideoFrame.from_ndarray(image, format="bgr24").reformat(format="yuv420p")
        frame.pts = i
        units.append(b"".join(bytes(packet) for packet in context.encode(frame)))
    return units


def test_a_stream_asking_for_more_reference_frames_than_the_cap_is_a_bad_frame() -> None:
    units = _x264_stream(64, 48, refs=16, count=1)
    assert sequence_parameters(units[0])[0].max_num_ref_frames == 16
    decoder = StreamDecoder(64, 48)
    with pytest.raises(ProtocolError, match="asks for 16 reference frames") as info:
        decoder.decode(units[0], 0)
    assert info.value.code is ErrorCode.BAD_FRAME and decoder.last_position is None
    ours = StreamEncoder(64, 48).encode(np.zeros((48, 64, 3), np.uint8)).payload
    assert sequence_parameters(ours)[0].max_num_ref_frames <= MAX_REF_FRAMES
    assert decoder.decode(ours, 0).shape == (48, 64, 3)


DECODERS_MEMORY = """
import gc
from pathlib import Path

import numpy as np

from shadowtutor.protocol.video_stream import StreamDecoder, StreamEncoder


def rss_mib():
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


encoder = StreamEncoder(1280, 720)
units = [encoder.encode(np.random.default_rng(i).integers(0, 255, (720, 1280, 3), dtype=np.uint8)).payload
         for i in range(2)]
decoders = [StreamDecoder(1280, 720) for _ in range(8)]
gc.collect()
before = rss_mib()
for decoder in decoders:
    decoder.decode(units[0], 0)
    decoder.decode(units[1], 1)
opened = rss_mib() - before
for decoder in decoders:
    decoder.close()
gc.collect()
print(opened, rss_mib() - before)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_closed_decoders_give_their_memory_back() -> None:
    """Measured in a fresh interpreter, whose heap holds no memory freed earlier by other tests."""
    done = subprocess.run([sys.executable, "-c", DECODERS_MEMORY], capture_output=True, text=True,
                          timeout=120, check=True)
    opened, left = (float(word) for word in done.stdout.split())
    assert opened > 20, f"8 open 720p decoders took only {opened:.0f} MiB"
    assert left < 12, f"8 closed 720p decoders left {left:.0f} MiB of the {opened:.0f} MiB they took"


def _texture(count: int, width: int = 160, height: int = 96) -> list[np.ndarray]:
    """A noisy picture drifting a pixel a frame: what libx264's rate control has to pay for."""
    base = np.random.default_rng(5).integers(0, 256, (height, width + count, 3), dtype=np.uint8)
    return [np.ascontiguousarray(base[:, i:i + width]) for i in range(count)]


def test_crf_holds_at_the_source_rate_whatever_the_clock_once_was() -> None:
    # libx264 spends bits per second of video: the same frames at 1000 FPS got far fewer bits
    # than at their real 10 FPS. Each frame is now encoded on its source's clock.
    frames = _texture(12)
    stream = StreamEncoder(160, 96, fps=10)
    at_ten = sum(len(stream.encode(f).payload) for f in frames)
    stream = StreamEncoder(160, 96, fps=1000)
    at_thousand = sum(len(stream.encode(f).payload) for f in frames)
    assert at_ten > 1.3 * at_thousand


def test_sparse_frames_keep_their_source_indices_as_timestamps() -> None:
    encoder, decoder = StreamEncoder(W, H, fps=30000 / 1001), StreamDecoder(W, H)
    assert encoder.rate == Fraction(30000, 1001)
    source = frames(20)
    for index in (3, 11, 19):
        sent = encoder.encode(source[index], index)
        assert close(decoder.decode(sent.payload, sent.position), source[index])
    with pytest.raises(ValueError, match="does not follow frame 19"):
        encoder.encode(source[0], 19)
    # a restarted stream starts its clock again
    encoder.restart()
    assert encoder.encode(source[0], 2).intra


@pytest.mark.parametrize("fps", [0.0, -5.0, 1001.0])
def test_a_rate_outside_the_clock_range_is_refused(fps: float) -> None:
    with pytest.raises(ValueError, match="frame rate"):
        stream_rate(fps)
