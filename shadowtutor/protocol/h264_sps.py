"""What an H.264 stream's sequence parameter sets ask of a decoder, read before it decodes them.

:func:`sequence_parameters` finds every SPS (NAL unit type 7) of an Annex B access unit and reads
its level and ``max_num_ref_frames`` (ITU-T H.264 section 7.3.2.1.1): the number of reference
pictures a decoder keeps, hence most of its memory. A stream decoder refuses an access unit whose
SPS asks for more than it allows before FFmpeg sees it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from shadowtutor.protocol.errors import ErrorCode, ProtocolError

_NAL_START = re.compile(b"\x00\x00\x01")
_SPS = 7
# profiles whose SPS carries chroma format, bit depths and scaling matrices
_HIGH_PROFILES = frozenset({100, 110, 122, 244, 44, 83, 86, 118, 128, 138, 139, 134, 135})


@dataclass(frozen=True)
class SequenceParameters:
    """One SPS: ``level_idc`` (10 x the level, e.g. 40 for 4.0) and ``max_num_ref_frames``."""

    level_idc: int
    max_num_ref_frames: int


class _Bits:
    """Big-endian bit reader over an RBSP; BAD_FRAME when it runs out."""

    def __init__(self, data: bytes) -> None:
        self.value, self.size, self.at = int.from_bytes(data, "big"), len(data) * 8, 0

    def bits(self, n: int) -> int:
        if self.at + n > self.size:
            raise ProtocolError(ErrorCode.BAD_FRAME, "an H.264 SPS is cut short")
        self.at += n
        return (self.value >> (self.size - self.at)) & ((1 << n) - 1)

    def ue(self) -> int:
        zeros = 0
        while self.bits(1) == 0:
            zeros += 1
            if zeros > 31:
                raise ProtocolError(ErrorCode.BAD_FRAME, "an H.264 SPS holds an over-long code")
        return (1 << zeros) - 1 + self.bits(zeros)

    def se(self) -> int:
        code = self.ue()
        return (code + 1) // 2 if code % 2 else -(code // 2)


def _rbsp(nal: bytes) -> bytes:
    """``nal`` without its emulation-prevention bytes (00 00 03 -> 00 00)."""
    return nal.replace(b"\x00\x00\x03", b"\x00\x00")


def _skip_scaling_list(bits: _Bits, size: int) -> None:
    last, following = 8, 8
    for _ in range(size):
        if following:
            following = (last + bits.se() + 256) % 256
        last = following or last


def _parse(rbsp: bytes) -> SequenceParameters:
    bits = _Bits(rbsp)
    profile_idc = bits.bits(8)
    bits.bits(8)
    level_idc = bits.bits(8)
    bits.ue()
    if profile_idc in _HIGH_PROFILES:
        chroma_format_idc = bits.ue()
        if chroma_format_idc == 3:
            bits.bits(1)
        bits.ue()
        bits.ue()
        bits.bits(1)
        if bits.bits(1):
            for index in range(8 if chroma_format_idc != 3 else 12):
                if bits.bits(1):
                    _skip_scaling_list(bits, 16 if index < 6 else 64)
    bits.ue()
    order_type = bits.ue()
    if order_type == 0:
        bits.ue()
    elif order_type == 1:
        bits.bits(1)
        bits.se()
        bits.se()
        cycle = bits.ue()
        if cycle > 255:
            raise ProtocolError(ErrorCode.BAD_FRAME, f"an H.264 SPS with {cycle} offsets")
        for _ in range(cycle):
            bits.se()
    return SequenceParameters(level_idc, bits.ue())


def sequence_parameters(access_unit: bytes) -> list[SequenceParameters]:
    """Every SPS of an Annex B ``access_unit``, in order; BAD_FRAME for one that is malformed."""
    found: list[SequenceParameters] = []
    starts = [match.end() for match in _NAL_START.finditer(access_unit)]
    ends = [*starts[1:], len(access_unit) + 3] if starts else []
    for begin, end in zip(starts, ends, strict=True):
        nal = access_unit[begin : end - 3]
        if nal and nal[0] & 0x1F == _SPS:
            found.append(_parse(_rbsp(nal[1:])))
    return found
