"""The memory one server-side H.264 decoder takes, as docs/security.md ("H.264 decoders") quotes.

``python -m shadowtutor_lab.stress.decoder_memory --refs 4`` encodes a stream with libx264 asked
to keep ``--refs`` reference frames (``--frames`` frames of moving noise, the worst case for
size), feeds it to ``--decoders`` :class:`StreamDecoder` s of the stream's size, and prints this
process's resident memory growth per decoder while they are open and what is left once they are
closed. ``--cap`` replaces the decoders' reference-frame cap (to measure an uncapped decoder).
"""

from __future__ import annotations

import argparse
import gc
import os
from fractions import Fraction

import av
import numpy as np

from shadowtutor.protocol import video_stream
from shadowtutor.protocol.video_stream import StreamDecoder, release_freed_memory
from shadowtutor_lab.stress.load_memory import read_rss

MIB = 1024 * 1024


def x264_units(images: list[np.ndarray], refs: int) -> list[bytes]:
    """The access units of BGR ``images`` (even sides) as one libx264 stream keeping ``refs``
    reference frames (veryfast, zerolatency, CRF 23): what the product's encoder sends, but for
    the number of references its SPS asks of a decoder."""
    height, width = images[0].shape[:2]
    context = av.CodecContext.create("libx264", "w")
    context.width, context.height, context.pix_fmt = width, height, "yuv420p"
    context.time_base = Fraction(1, 1000)
    context.options = {"preset": "veryfast", "tune": "zerolatency", "refs": str(refs), "crf": "23"}
    units = []
    for index, image in enumerate(images):
        frame = av.VideoFrame.from_ndarray(image, format="bgr24").reformat(format="yuv420p")
        frame.pts = index
        units.append(b"".join(bytes(packet) for packet in context.encode(frame)))
    return units


def moving_noise(width: int, height: int, frames: int) -> list[np.ndarray]:
    """``frames`` BGR images of one noise image moving 8 pixels a frame: the worst case for size."""
    noise = np.random.default_rng(0).integers(0, 255, (height, width, 3), dtype=np.uint8)
    return [np.roll(noise, 8 * index, axis=1) for index in range(frames)]


def measure(width: int, height: int, refs: int, frames: int, decoders: int) -> tuple[float, float]:
    """MiB of resident memory per open decoder, and MiB left in all once they are closed."""
    units = x264_units(moving_noise(width, height, frames), refs)
    gc.collect()
    release_freed_memory()
    before = read_rss(os.getpid())
    opened = [StreamDecoder(width, height) for _ in range(decoders)]
    for decoder in opened:
        for position, unit in enumerate(units):
            decoder.decode(unit, position)
    gc.collect()
    per_decoder = (read_rss(os.getpid()) - before) / decoders / MIB
    for decoder in opened:
        decoder.close()
    del opened
    gc.collect()
    return per_decoder, (read_rss(os.getpid()) - before) / MIB


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--width", type=int, default=1920)
    parser.add_argument("--height", type=int, default=1080)
    parser.add_argument("--refs", type=int, default=video_stream.MAX_REF_FRAMES)
    parser.add_argument("--frames", type=int, default=20)
    parser.add_argument("--decoders", type=int, default=4)
    parser.add_argument("--cap", type=int, default=None, help="reference-frame cap to measure at")
    args = parser.parse_args(argv)
    if args.cap is not None:
        video_stream.MAX_REF_FRAMES = args.cap
    per_decoder, left = measure(args.width, args.height, args.refs, args.frames, args.decoders)
    print(
        f"{args.width}x{args.height}, {args.refs} reference frames, {args.frames} frames: "
        f"{per_decoder:.1f} MiB per open decoder; {left:.0f} MiB left after closing "
        f"{args.decoders}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
