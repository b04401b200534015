from __future__ import annotations

import json
import random
import struct

import pytest

from shadowtutor.protocol.messages import Hello, decode, encode
from shadowtutor_lab.stress.fuzz_mutate import (
    BYTE_MUTATORS,
    WRONG_VALUES,
    change_length_field,
    damage_header_text,
    header_span,
    mutate_bytes,
    mutate_header,
    pack,
)

HELLO = encode(Hello(edge_id="cam", class_names=["a", "b"], frame_width=64, frame_height=48))


def test_pack_writes_any_header_in_the_envelope() -> None:
    data = pack(1, {"edge_id": 5, "x": "\ud800"}, b"payload", version=3)
    assert data[:4] == b"ST\x03\x01"
    start, end = header_span(data)
    assert json.loads(data[start:end]) == {"edge_id": 5, "x": "\ud800"} and data[end:] == b"payload"
    assert pack(1, Hello(edge_id="cam", class_names=["a", "b"], frame_width=64, frame_height=48).header()) == HELLO


@pytest.mark.parametrize("name", sorted(BYTE_MUTATORS))
def test_each_byte_mutator_is_deterministic_by_seed_and_changes_something(name: str) -> None:
    mutator = BYTE_MUTATORS[name]
    outputs = [mutator(HELLO, random.Random(seed)) for seed in range(20)]
    assert outputs == [mutator(HELLO, random.Random(seed)) for seed in range(20)]
    assert any(out != HELLO for out in outputs)
    if name != "bytes inserted":
        assert mutator(b"", random.Random(0)) == b""  # nothing to damage


def test_length_field_and_header_damage_keep_the_rest() -> None:
    for seed in range(20):
        changed = change_length_field(HELLO, random.Random(seed))
        assert changed[:4] == HELLO[:4] and changed[8:] == HELLO[8:]
        damaged = damage_header_text(HELLO, random.Random(seed))
        assert damaged[:8] == HELLO[:8] and len(damaged) == len(HELLO)
    assert {struct.unpack(">I", change_length_field(HELLO, random.Random(s))[4:8])[0] for s in range(50)} >= {0, 2**31}


def test_mutate_bytes_names_its_mutations_and_repeats_by_seed() -> None:
    first = [mutate_bytes(HELLO, random.Random(seed)) for seed in range(50)]
    assert first == [mutate_bytes(HELLO, random.Random(seed)) for seed in range(50)]
    names = {part for name, _ in first for part in name.split(" + ")}
    assert names == set(BYTE_MUTATORS)


def test_mutate_header_sets_wrong_values_removes_and_adds_fields() -> None:
    header = decode(HELLO).header()
    results = [mutate_header(header, random.Random(seed)) for seed in range(60)]
    kinds = {name.split(" = ")[0] if " = " in name else name.split()[-1] for name, _ in results}
    assert "removed" in kinds and "added" in kinds and kinds & set(header)
    for name, out in results:
        if " = " in name:
            field = name.split(" = ")[0]
            assert any(out[field] is v or (type(out[field]) is type(v) and out[field] == v) for v in WRONG_VALUES)
        assert header == decode(HELLO).header()  # the original is left alone
