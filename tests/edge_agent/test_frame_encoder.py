"""The edge's frame encoder with the real libx264 encoder on 64x48 frames."""

from __future__ import annotations

import numpy as np
import pytest

from edge_agent.frame_encoder import FrameEncoder
from shadowtutor.protocol.codecs import decode_frame
from shadowtutor.protocol.video_stream import StreamDecoder, frame_codecs_for


def frame(i: int, width: int = 64, height: int = 48) -> np.ndarray:
    return np.random.default_rng(i).integers(0, 255, (height, width, 3), dtype=np.uint8)


def test_image_codecs_carry_no_stream_position() -> None:
    encoded = FrameEncoder(quality=90).encode(frame(0), "jpeg", "s1")
    assert encoded.stream_position is None and encoded.epoch is None
    assert decode_frame(encoded.payload, "jpeg", 64, 48).shape == (48, 64, 3)


def test_a_session_streams_in_order_and_a_new_session_or_size_starts_an_intra_frame() -> None:
    encoder = FrameEncoder()
    positions = [encoder.encode(frame(i), "h264", "s1").stream_position for i in range(3)]
    assert positions == [0, 1, 2]
    other = encoder.encode(frame(3), "h264", "s2")
    assert (other.stream_position, other.epoch) == (0, 2)
    resized = encoder.encode(frame(4, 96, 64), "h264", "s2")
    assert (resized.stream_position, resized.epoch) == (0, 3)


def test_a_refusal_restarts_the_current_stream_only_and_the_decoder_follows() -> None:
    encoder, decoder = FrameEncoder(), StreamDecoder(64, 48)
    first = encoder.encode(frame(0), "h264", "s1")
    decoder.decode(first.payload, 0)
    refused = encoder.encode(frame(1), "h264", "s1")
    assert refused.epoch is not None and encoder.restart(refused.epoch)
    intra = encoder.encode(frame(2), "h264", "s1")
    assert intra.stream_position == 0 and intra.epoch == refused.epoch + 1
    # a later refusal of a frame from the old stream leaves the new one alone
    assert not encoder.restart(refused.epoch) and not encoder.restart(None)
    after = encoder.encode(frame(3), "h264", "s1")
    assert after.stream_position == 1
    decoder.decode(intra.payload, 0)
    assert decoder.decode(after.payload, 1).shape == (48, 64, 3)


def test_odd_sides_offer_no_stream_codec() -> None:
    assert frame_codecs_for(("h264", "jpeg", "raw"), 64, 48) == ["h264", "jpeg", "raw"]
    assert frame_codecs_for(("h264", "jpeg", "raw"), 63, 48) == ["jpeg", "raw"]


def test_frames_go_at_the_key_frame_scale_in_either_kind_of_codec() -> None:
    encoder = FrameEncoder(quality=90, scale=0.5)
    image = encoder.encode(frame(0, 96, 64), "jpeg", "s1")
    assert (image.width, image.height) == (48, 32)
    assert decode_frame(image.payload, "jpeg", 48, 32).shape == (32, 48, 3)
    streamed = encoder.encode(frame(1, 96, 64), "h264", "s1")
    assert (streamed.width, streamed.height, streamed.stream_position) == (48, 32, 0)
    assert StreamDecoder(48, 32).decode(streamed.payload, 0).shape == (32, 48, 3)
    # 0.3 of 96x64 is 28.8x19.2: each side rounds to an even number
    assert (FrameEncoder(scale=0.3).encode(frame(2, 96, 64), "h264", "s1").width,) == (28,)


def test_a_scale_outside_zero_to_one_is_refused() -> None:
    for scale in (0.0, 1.5):
        with pytest.raises(ValueError, match="scale"):
            FrameEncoder(scale=scale)


def test_a_stream_runs_on_the_sources_clock_and_keeps_the_frame_indices() -> None:
    encoder = FrameEncoder(fps=10.0)
    sent = [encoder.encode(frame(i), "h264", "s1", frame_index=8 * i) for i in range(3)]
    assert [e.stream_position for e in sent] == [0, 1, 2]
    # a new session's stream starts its clock again
    assert encoder.encode(frame(4), "h264", "s2", frame_index=0).stream_position == 0


def test_a_source_that_starts_over_starts_a_new_stream() -> None:
    """A looped file (or any source whose frame index goes back) gets a new stream, intra at position
    0, instead of an error."""
    encoder = FrameEncoder(fps=30.0)
    first = encoder.encode(frame(0), "h264", "s", frame_index=10)
    later = encoder.encode(frame(1), "h264", "s", frame_index=20)
    again = encoder.encode(frame(2), "h264", "s", frame_index=20)
    assert (first.stream_position, later.stream_position, again.stream_position) == (0, 1, 0)
    assert again.epoch == later.epoch + 1
