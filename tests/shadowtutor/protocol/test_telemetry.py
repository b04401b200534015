"""TELEMETRY's content rules (docs/protocol.md): what a receiver refuses as bad_message."""

from __future__ import annotations

import math

import pytest

from shadowtutor.protocol.errors import ErrorCode, ProtocolError
from shadowtutor.protocol.messages import Telemetry, decode, encode
from shadowtutor.protocol.telemetry import MAX_BUCKETS, HistogramSnapshot, check_telemetry
from shadowtutor_lab.stress.fuzz_mutate import pack

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


ACCELERATION = dict(change_based_frames={"change": 7, "full": 2, "fallback": 1},
                    changed_fraction={"in_conv1": 0.02, "enc2.conv3": 0.5, "tail": 0.1, "output": 0.0},
                    regions={"segment": 4, "flow": 12}, region_key_age_frames={"buckets": [0, 1, 2],
                                                                              "counts": [4, 8, 4, 0], "sum": 16},
                    cluster_workers=3, region_queue_depth=0)
FIELD_OPERATIONS = dict(key_frames_dropped=5, output_dropped={"labels": 2, "overlay": 0, "state": 1},
                        labels_removed=40, key_frames_deferred=3, uplink_budget_bps=200_000,
                        downlink_budget_bps=100_000)


def test_the_figures_added_within_version_1_survive_the_wire() -> None:
    message = Telemetry(**COUNTS, **ACCELERATION, **FIELD_OPERATIONS)
    report = check_telemetry(decode(encode(message)))
    assert report.telemetry == message
    assert report.histograms["region_key_age_frames"].cumulative()[-1] == (math.inf, 16)


def test_a_report_without_the_added_figures_is_still_valid() -> None:
    """An edge that predates them, or whose features are off: the header lacks the fields."""
    header = Telemetry(**COUNTS).header()
    for name in (*ACCELERATION, *FIELD_OPERATIONS):
        assert header.pop(name) is None
    report = check_telemetry(decode(pack(Telemetry.TYPE, header)))
    assert report.telemetry.regions is None and set(report.histograms) == set()


def test_an_edge_from_before_the_fused_tail_may_still_report_its_retired_layers() -> None:
    message = Telemetry(**COUNTS, changed_fraction={"in_conv1": 0.02, "out_conv1": 0.2, "out_conv2": 0.1})
    assert check_telemetry(decode(encode(message))).telemetry == message


def test_fields_a_receiver_does_not_know_are_ignored() -> None:
    """What lets a newer edge report to an older server within version 1 (docs/protocol.md, Envelope)."""
    header = {**Telemetry(**COUNTS).header(), "figures_of_tomorrow": {"x": 1}}
    assert check_telemetry(decode(pack(Telemetry.TYPE, header))).telemetry == Telemetry(**COUNTS)


@pytest.mark.parametrize(
    "changes",
    [
        {"key_frames_dropped": -1},
        {"labels_removed": 2**63},
        {"cluster_workers": -1},
        {"uplink_budget_bps": -1},
        {"key_frames_deferred": -2},
        {"region_queue_depth": -3},
        {"output_dropped": {"labels": -1}},
        {"output_dropped": {"thumbnails": 1}},  # not an output of the edge: no new label value
        {"output_dropped": {"labels": 1.5}},
        {"change_based_frames": {"sparse": 1}},
        {"change_based_frames": {"change": True}},
        {"regions": {"warp": 3}},
        {"regions": {"flow": None}},
        {"changed_fraction": {"in_conv1": 1.5}},
        {"changed_fraction": {"in_conv1": -0.1}},
        {"changed_fraction": {"in_conv1": math.nan}},
        {"changed_fraction": {"layer_of_another_student": 0.5}},
        {"changed_fraction": {"in_conv1": "0.5"}},
        {"region_key_age_frames": {"buckets": [2, 1], "counts": [0, 0, 0], "sum": 0}},
    ],
)
def test_impossible_added_figures_are_bad_messages(changes: dict) -> None:
    with pytest.raises(ProtocolError) as refused:
        check_telemetry(decode(encode(Telemetry(**COUNTS, **changes))))
    assert refused.value.code is ErrorCode.BAD_MESSAGE
    assert next(iter(changes)) in refused.value.message


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


@pytest.mark.parametrize("changes", [{"frames": 1.5}, {"stride": "8"}, {"inference_seconds": [1]}, {"frames": None},
                                     {"regions": [4, 12]}, {"cluster_workers": 2.0}, {"labels_removed": "3"}])
def test_wrong_types_fail_in_the_decoder(changes: dict) -> None:
    header = {**Telemetry(**COUNTS).header(), **changes}
    with pytest.raises(ProtocolError, match="TELEMETRY|Telemetry"):
        decode(pack(Telemetry.TYPE, header))
