"""TELEMETRY's content rules (docs/protocol.md): what a receiver refuses as bad_message."""

from __future__ import annotations

import math

import pytest

from shadowtutor.protocol.errors import ErrorCode, ProtocolError
from shadowtutor.protocol.messages import Telemetry, decode, encode
from shadowtutor.protocol.telemetry import MAX_BUCKETS, HistogramSnapshot, check_telemetry
from shadowtutor.stress.fuzz_mutate import pack

COUNTS = dict(frames=1, key_frames=1, updates_applied=0, resyncs=0, reconnects=0, bytes_sent=0, bytes_received=0,
              waited_seconds=0.0)
HISTOGRAM = {"buckets": [0.1, 1.0], "counts": [1, 2, 3], "sum": 4.5}


def test_a_full_report_survives_the_wire() -> None:
    message = Telemetry(**COUNTS, stride=8, student_metric=1.0, weights_version=0, seconds_since_update=0.0,
                        inference_seconds=HISTOGRAM, blocked_seconds=HISTOGRAM, roundtrip_seconds=None)
    report = check_telemetry(decode(encode(message)))
    assert report.telemetry == message
    snapshot = report.histograms["inference_seconds"]
    assert snapshot.cumulative() == [(0.1, 1), (1.0, 3), (math.inf, 6)] and snapshot.count == 6
    assert set(report.histograms) == {"inference_seconds", "blocked_seconds"}
    assert HistogramSnapshot.from_cumulative(snapshot.cumulative(), snapshot.sum) == snapshot


@pytest.mark.parametrize(
    "changes",
    [
        {"frames": -1},
        {"bytes_sent": 2**63},
        {"waited_seconds": -0.5},
        {"waited_seconds": math.inf},
        {"stride": 0},
        {"student_metric": 1.5},
        {"weights_version": -1},
        {"seconds_since_update": -1.0},
        {"inference_seconds": {"buckets": [], "counts": [1], "sum": 0}},
        {"inference_seconds": {"buckets": [1.0, 0.5], "counts": [0, 0, 0], "sum": 0}},
        {"inference_seconds": {"buckets": [0.5, 0.5], "counts": [0, 0, 0], "sum": 0}},
        {"inference_seconds": {"buckets": [0.5], "counts": [0], "sum": 0}},
        {"inference_seconds": {"buckets": [0.5], "counts": [0, -1], "sum": 0}},
        {"inference_seconds": {"buckets": [0.5], "counts": [0, 1.0], "sum": 0}},
        {"inference_seconds": {"buckets": [0.5], "counts": [0, 1], "sum": "1"}},
        {"inference_seconds": {"buckets": ["0.5"], "counts": [0, 1], "sum": 0}},
        {"blocked_seconds": {"counts": [0], "sum": 0}},
        {"roundtrip_seconds": {"buckets": list(range(1, MAX_BUCKETS + 2)), "counts": [0] * (MAX_BUCKETS + 2),
                               "sum": 0}},
        {"roundtrip_seconds": {"buckets": [1.0], "counts": [2**62, 2**62], "sum": 0}},
    ],
)
def test_impossible_values_are_bad_messages(changes: dict) -> None:
    with pytest.raises(ProtocolError) as refused:
        check_telemetry(Telemetry(**{**COUNTS, **changes}))
    assert refused.value.code is ErrorCode.BAD_MESSAGE
    assert next(iter(changes)) in refused.value.message


@pytest.mark.parametrize("changes", [{"frames": 1.5}, {"stride": "8"}, {"inference_seconds": [1]}, {"frames": None}])
def test_wrong_types_fail_in_the_decoder(changes: dict) -> None:
    header = {**Telemetry(**COUNTS).header(), **changes}
    with pytest.raises(ProtocolError, match="TELEMETRY|Telemetry"):
        decode(pack(Telemetry.TYPE, header))
