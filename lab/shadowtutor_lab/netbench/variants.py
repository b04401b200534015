"""What the network benchmark compares: ShadowTutor against naive offloading as one H.264 stream (the
baseline: what a camera that offloads sends), with JPEG frames and with raw frames.

Each variant is one ``shadowtutor edge`` configuration; codecs are chosen with the agent's own
flags (``--frame-codecs``, ``--frame-quality``, ``--weight-codecs``), which the server accepts
as offered (it allows every codec by default).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

SHADOWTUTOR = "shadowtutor"
NAIVE_H264 = "naive-h264"
NAIVE_JPEG = "naive-jpeg"
NAIVE_RAW = "naive-raw"
BASELINE = NAIVE_H264
VARIANT_NAMES = (SHADOWTUTOR, NAIVE_H264, NAIVE_JPEG, NAIVE_RAW)
TITLES = {SHADOWTUTOR: "ShadowTutor", NAIVE_H264: "naive (H.264 stream)", NAIVE_JPEG: "naive (JPEG)",
          NAIVE_RAW: "naive (raw)"}


@dataclass(frozen=True)
class Variant:
    name: str
    mode: str  # the agent's --mode
    edge_args: tuple[str, ...]  # codec flags for `shadowtutor edge`

    @property
    def title(self) -> str:
        return TITLES.get(self.name, self.name)

    def to_dict(self) -> dict[str, object]:
        return {"mode": self.mode, "edge_args": list(self.edge_args)}


def build_variants(
    names: Sequence[str] = VARIANT_NAMES,
    frame_codecs: str | None = None,
    jpeg_quality: int | None = None,
    weight_codecs: str | None = None,
) -> tuple[Variant, ...]:
    """The variants ``names``; ``frame_codecs`` and ``weight_codecs`` (comma lists) apply to
    ShadowTutor's key frames and updates, ``jpeg_quality`` to every JPEG frame; None keeps the
    agent's defaults."""
    unknown = [n for n in names if n not in VARIANT_NAMES]
    if unknown or not names:
        raise ValueError(f"unknown variants {unknown}: choose from {', '.join(VARIANT_NAMES)}")
    quality = ("--frame-quality", str(jpeg_quality)) if jpeg_quality is not None else ()
    shadow = (
        *(("--frame-codecs", frame_codecs) if frame_codecs else ()),
        *(("--weight-codecs", weight_codecs) if weight_codecs else ()),
        *quality,
    )
    every = {
        SHADOWTUTOR: Variant(SHADOWTUTOR, "distill", shadow),
        NAIVE_H264: Variant(NAIVE_H264, "naive", ("--frame-codecs", "h264")),
        NAIVE_JPEG: Variant(NAIVE_JPEG, "naive", ("--frame-codecs", "jpeg", *quality)),
        NAIVE_RAW: Variant(NAIVE_RAW, "naive", ("--frame-codecs", "raw")),
    }
    return tuple(every[n] for n in dict.fromkeys(names))
