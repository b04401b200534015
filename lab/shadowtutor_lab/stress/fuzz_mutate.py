"""Mutators for the fuzzer: damage a valid wire message at the byte level or in its JSON header.

Every function takes a :class:`random.Random` and is deterministic given its state. ``pack``
builds an envelope from any JSON-able header, bypassing the message classes, so that headers
with wrong field types can be sent (docs/protocol.md, "Envelope").
"""

from __future__ import annotations

import json
import random
import struct
from collections.abc import Callable
from typing import Any

from shadowtutor.protocol.messages import MAGIC, PREFIX, PROTOCOL_VERSION

# Values a header field is replaced with: wrong types, huge and negative numbers, odd strings.
WRONG_VALUES: tuple[Any, ...] = (
    None, True, False, 0, -1, -(2**31), 2**31, 2**63, -(2**63) - 1, 2**64, 10**30, 1.5, -0.0, 1e308, -1e308,
    "", "x", "x" * 5000, "\u0000", "\ud800", "\u202e\u00e9\U0001f600", [], [1, "a"], ["raw"] * 1000, {}, {"a": [None]},
)


def pack(type_id: int, header: Any, payload: bytes = b"", *, version: int = PROTOCOL_VERSION) -> bytes:
    """An envelope with ``header`` serialised as JSON, whatever its content (``json.dumps`` rules)."""
    raw = json.dumps(header, separators=(",", ":")).encode()  # ASCII: non-ASCII text is \u-escaped
    return pack_raw(type_id, raw, payload, version=version)


def pack_raw(type_id: int, header: bytes, payload: bytes = b"", *, version: int = PROTOCOL_VERSION) -> bytes:
    """An envelope around header bytes as they are (JSON or not)."""
    return PREFIX.pack(MAGIC, version, type_id, len(header)) + header + payload


def header_span(data: bytes) -> tuple[int, int]:
    """``(start, end)`` of the JSON header inside a packed message (clamped to the data)."""
    if len(data) < PREFIX.size:
        return len(data), len(data)
    (length,) = struct.unpack_from(">I", data, 4)
    return PREFIX.size, min(len(data), PREFIX.size + length)


def flip_bits(data: bytes, rng: random.Random) -> bytes:
    if not data:
        return data
    out = bytearray(data)
    for _ in range(rng.randint(1, 8)):
        out[rng.randrange(len(out))] ^= 1 << rng.randrange(8)
    return bytes(out)


def insert_bytes(data: bytes, rng: random.Random) -> bytes:
    at = rng.randint(0, len(data))
    return data[:at] + rng.randbytes(rng.randint(1, 64)) + data[at:]


def delete_bytes(data: bytes, rng: random.Random) -> bytes:
    if not data:
        return data
    at = rng.randrange(len(data))
    return data[:at] + data[at + rng.randint(1, min(64, len(data) - at)):]


def truncate(data: bytes, rng: random.Random) -> bytes:
    return data[: rng.randint(0, max(0, len(data) - 1))]


def duplicate_span(data: bytes, rng: random.Random) -> bytes:
    if not data:
        return data
    start = rng.randrange(len(data))
    end = min(len(data), start + rng.randint(1, 256))
    return data[:end] + data[start:end] + data[end:]


def change_length_field(data: bytes, rng: random.Random) -> bytes:
    """The header length u32 set to 0, off by a little, past the message, or huge."""
    if len(data) < PREFIX.size:
        return data
    (length,) = struct.unpack_from(">I", data, 4)
    choices = [0, 1, length - 1, length + 1, len(data), len(data) - PREFIX.size + 1, 65_536, 65_537, 2**31, 2**32 - 1]
    new = rng.choice(choices) % 2**32
    return data[:4] + struct.pack(">I", new) + data[PREFIX.size:]


def change_prefix_byte(data: bytes, rng: random.Random) -> bytes:
    """One of the magic, version or type bytes set to a random value."""
    if len(data) < 4:
        return data
    at = rng.randrange(4)
    return data[:at] + bytes([rng.randrange(256)]) + data[at + 1:]


def damage_header_text(data: bytes, rng: random.Random) -> bytes:
    """Bytes of the JSON header (only) flipped or replaced, keeping the length field right."""
    start, end = header_span(data)
    if end <= start:
        return data
    header = bytearray(data[start:end])
    for _ in range(rng.randint(1, 4)):
        header[rng.randrange(len(header))] = rng.choice(b'{}[]",:0\\\x00\xff\xc3 9e-')
    return data[:start] + bytes(header) + data[end:]


BYTE_MUTATORS: dict[str, Callable[[bytes, random.Random], bytes]] = {
    "bit flips": flip_bits,
    "bytes inserted": insert_bytes,
    "bytes deleted": delete_bytes,
    "truncated": truncate,
    "span duplicated": duplicate_span,
    "header length changed": change_length_field,
    "prefix byte changed": change_prefix_byte,
    "header text damaged": damage_header_text,
}


def mutate_bytes(data: bytes, rng: random.Random) -> tuple[str, bytes]:
    """One to three byte-level mutations; returns their names and the result."""
    names = [rng.choice(sorted(BYTE_MUTATORS)) for _ in range(rng.randint(1, 3))]
    for name in names:
        data = BYTE_MUTATORS[name](data, rng)
    return " + ".join(names), data


def mutate_header(header: dict[str, Any], rng: random.Random) -> tuple[str, dict[str, Any]]:
    """A copy of ``header`` with one field set to a wrong value, removed, or an unknown one added."""
    out = dict(header)
    action = rng.choice(("wrong value", "wrong value", "wrong value", "removed", "added"))
    if action == "added" or not out:
        out[rng.choice(("extra", "seq ", "\u00e9", "x" * 300))] = rng.choice(WRONG_VALUES)
        return "unknown field added", out
    name = rng.choice(sorted(out))
    if action == "removed":
        del out[name]
        return f"{name} removed", out
    value = rng.choice(WRONG_VALUES)
    out[name] = value
    return f"{name} = {_short(value)}", out


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 24 else f"{text[:21]}..."
