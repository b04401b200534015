"""The agent in-process against the stand-in server (tests/support/stand_in_server.py; tests/e2e/ uses the real one)."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import cv2
import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

from edge_agent.agent import EdgeAgent
from edge_agent.errors import ServerRefusedError
from edge_agent.settings import EdgeSettings
from edge_agent.sinks import CallbackSink
from shadowtutor.algorithms.params import AlgorithmParams
from shadowtutor.classes import LVS_CLASSES
from shadowtutor.protocol.errors import ErrorCode
from shadowtutor.protocol.messages import Telemetry
from shadowtutor.protocol.telemetry import check_telemetry
from tests.edge_agent.test_sources import write_video
from tests.support.prometheus import sample_value
from tests.support.stand_in_server import StandInServer, naive_labels


@pytest.fixture
def video(tmp_path: Path) -> Path:
    return write_video(tmp_path / "clip.mp4", 40, (64, 48))


def settings(server: StandInServer, video: Path, out: Path, **overrides: object) -> EdgeSettings:
    values = dict(server=server.url, source=str(video), output_dir=out, metrics_port=0, backend="reference",
                  frame_codecs=("raw",), weight_codecs=("f32",), reconnect_min=0.05, reconnect_max=0.2,
                  startup_timeout=10.0, save_labels=True, state_dir=out / "state")
    values.update(overrides)
    return EdgeSettings(**values)


def metric_values(exposition: bytes) -> dict[str, float]:
    return {s.name: s.value for f in text_string_to_metric_families(exposition.decode()) for s in f.samples
            if "le" not in s.labels}


def test_distill_run_labels_every_frame_and_counts_every_byte(
    stand_in: StandInServer, video: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    agent = EdgeAgent(settings(stand_in, video, out, overlay=True))
    summary = agent.run()
    assert summary.frames == summary.labelled_frames == 40 and summary.stopped_by == "end_of_source"
    assert len(list((out / "labels").glob("*.png"))) == 40 and (out / "overlay.mp4").stat().st_size > 0
    versions = [(v["session_id"], v["version"]) for v in summary.versions_applied]
    assert versions == [("s1", v) for v in range(len(versions))] and len(versions) >= 9
    assert summary.key_frames == summary.frames_sent and len(versions) - 1 == summary.updates_applied
    # Each key frame's update is applied at a later frame; on a loaded machine the last one can land after
    # the last frame, when there is no frame left to apply it to.
    assert summary.key_frames - summary.updates_applied in (0, 1)
    assert summary.bytes_sent == stand_in.received_once_settled(summary.bytes_sent)
    assert summary.bytes_received == stand_in.bytes_sent
    values = metric_values(agent.metrics.exposition())
    assert values["shadowtutor_edge_sent_bytes_total"] == summary.bytes_sent
    assert values["shadowtutor_edge_received_bytes_total"] == summary.bytes_received
    assert values["shadowtutor_edge_frames_total"] == 40
    assert values["shadowtutor_edge_key_frames_total"] == summary.key_frames
    assert values["shadowtutor_edge_updates_applied_total"] == summary.updates_applied
    assert values["shadowtutor_edge_student_metric"] == pytest.approx(stand_in.metric)
    assert values["shadowtutor_edge_connected"] == 0  # closed at the end
    assert json.loads((out / "summary.json").read_text()) == json.loads(json.dumps(summary.to_dict()))


def test_a_student_size_is_announced_and_labels_come_back_at_the_frames_size(
    stand_in: StandInServer, video: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    summary = EdgeAgent(settings(stand_in, video, out, student_size="96x64", max_frames=10)).run()
    assert summary.labelled_frames == 10 and stand_in.sessions[0].hello.student_size == [96, 64]
    labels = [cv2.imread(str(path), cv2.IMREAD_UNCHANGED) for path in sorted((out / "labels").glob("*.png"))]
    assert len(labels) == 10 and all(label.shape == (48, 64) for label in labels)


def test_a_full_disk_neither_stops_nor_slows_labelling(
    stand_in: StandInServer, video: Path, tmp_path: Path, full_disk: Path
) -> None:
    out = full_disk.parent  # out/labels is on the full file system; summary.json beside it is not
    agent = EdgeAgent(settings(stand_in, video, out))
    summary = agent.run()
    assert summary.frames == summary.labelled_frames == 40 and summary.updates_applied >= 9
    assert summary.label_writes_dropped == {"labels": 40}
    text = agent.metrics.exposition().decode()
    assert sample_value(text, "shadowtutor_edge_output_dropped_total", edge_id=summary.edge_id, output="labels") == 40
    assert sample_value(text, "shadowtutor_edge_frames_total", edge_id=summary.edge_id) == 40


def test_naive_run_keeps_the_servers_label_maps(stand_in: StandInServer, video: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    summary = EdgeAgent(settings(stand_in, video, out, mode="naive")).run()
    assert summary.frames == summary.labelled_frames == summary.key_frames == summary.frames_sent == 40
    capture = cv2.VideoCapture(str(video))
    for i in range(40):
        ok, frame = capture.read()
        stored = cv2.imread(str(out / "labels" / f"{i:06d}.png"), cv2.IMREAD_UNCHANGED)
        np.testing.assert_array_equal(stored, naive_labels(frame, len(LVS_CLASSES)))


def test_server_crash_mid_run_every_frame_labelled_then_reconnect(video: Path, tmp_path: Path) -> None:
    first = StandInServer(seed=0).start()
    servers = [first]
    long_video = write_video(tmp_path / "long.mp4", 150, (64, 48))

    def crash_and_restart(index: int, _frame: np.ndarray, _labels: np.ndarray) -> None:
        time.sleep(0.01)  # pace the run (the writer queue then throttles inference)
        if index == 30:
            first.kill()
        if index == 60:
            second = StandInServer(seed=1)
            second.port = first.port
            servers.append(second.start())

    agent = EdgeAgent(settings(first, long_video, tmp_path / "out"), [CallbackSink(crash_and_restart)])
    try:
        summary = agent.run()
    finally:
        for server in servers:
            if server._thread.is_alive():
                server.kill()
    assert summary.frames == summary.labelled_frames == 150
    assert len(list((tmp_path / "out" / "labels").glob("*.png"))) == 150
    assert summary.sessions == ["s1", "s1"] and summary.reconnects == 1  # each stand-in numbers from s1
    history = [(v["version"], v["origin"]) for v in summary.versions_applied]
    restart = history.index((0, "welcome"), 1)
    assert [v for v, _ in history[:restart]] == list(range(restart))
    assert [v for v, _ in history[restart:]] == list(range(len(history) - restart))
    # the new server's WELCOME and at least one of its updates were applied (how many more fit in the run
    # depends on when the reconnection's back-off ends: 1 in 4 runs under load had only one)
    assert len(history) - restart >= 2
    assert summary.frames_sent < summary.key_frames  # some key frames fell into the outage
    assert summary.bytes_received == first.bytes_sent + servers[1].bytes_sent


def test_summary_and_metrics_count_a_resumed_reconnect(stand_in: StandInServer, video: Path, tmp_path: Path) -> None:
    stand_in.resume = True
    long_video = write_video(tmp_path / "long.mp4", 120, (64, 48))
    dropped = threading.Event()

    def drop_once(index: int, _frame: np.ndarray, _labels: np.ndarray) -> None:
        time.sleep(0.01)  # pace the run, so that the reconnect lands inside it
        if index == 30 and stand_in.sessions and stand_in.sessions[0].version >= 1:
            stand_in.drop()
            dropped.set()

    out = tmp_path / "out"
    agent = EdgeAgent(settings(stand_in, long_video, out), [CallbackSink(drop_once)])
    summary = agent.run()
    assert dropped.is_set() and summary.frames == 120
    written = json.loads((out / "summary.json").read_text())
    assert written["sessions"] == ["s1"] and len(stand_in.sessions) == 1
    assert (written["reconnects"], written["resumed_reconnects"]) == (1, 1)
    assert written["first_handshake_bytes_received"] > 100_000  # the WELCOME with the model
    assert 0 < written["handshake_bytes_received_total"] - written["first_handshake_bytes_received"] < 2_000
    values = metric_values(agent.metrics.exposition())
    assert values["shadowtutor_edge_reconnects_total"] == values["shadowtutor_edge_resumed_reconnects_total"] == 1


def test_a_refusing_server_ends_the_run_with_an_error(stand_in: StandInServer, video: Path, tmp_path: Path) -> None:
    stand_in.refuse = ErrorCode.INCOMPATIBLE_MODEL
    with pytest.raises(ServerRefusedError, match="incompatible_model"):
        EdgeAgent(settings(stand_in, video, tmp_path / "out")).run()
    assert not (tmp_path / "out" / "summary.json").exists()


def test_stop_request_finishes_the_current_frame(stand_in: StandInServer, video: Path, tmp_path: Path) -> None:
    agent = EdgeAgent(settings(stand_in, video, tmp_path / "out"))
    stop_after = threading.Event()
    agent.extra_sinks.append(CallbackSink(lambda i, _f, _labels: i == 5 and (agent.request_stop(), stop_after.set())))
    summary = agent.run()
    assert stop_after.is_set() and summary.stopped_by == "stop"
    assert 6 <= summary.frames < 40 and summary.labelled_frames == summary.frames
    assert len(list((tmp_path / "out" / "labels").glob("*.png"))) == summary.frames


def test_max_frames(stand_in: StandInServer, video: Path, tmp_path: Path) -> None:
    summary = EdgeAgent(settings(stand_in, video, tmp_path / "out", max_frames=7)).run()
    assert summary.frames == 7 and summary.stopped_by == "max_frames"


def test_max_fps_paces_the_run(stand_in: StandInServer, video: Path, tmp_path: Path) -> None:
    summary = EdgeAgent(settings(stand_in, video, tmp_path / "out", max_frames=12, max_fps=20)).run()
    assert summary.frames == 12
    assert 11 / 20 <= summary.wall_seconds and summary.fps <= 21


def test_summary_times_the_frame_loop_and_each_update_apart_from_the_handshake(
    stand_in: StandInServer, video: Path, tmp_path: Path
) -> None:
    summary = EdgeAgent(settings(stand_in, video, tmp_path / "out", max_frames=12, max_fps=20)).run()
    assert 11 / 20 <= summary.loop_seconds < summary.wall_seconds  # paced inside the loop; start-up left out
    assert 0 < summary.first_handshake_bytes_sent < summary.bytes_sent
    assert 0 < summary.first_handshake_bytes_received < summary.bytes_received
    assert len(summary.update_roundtrip_seconds) == summary.key_frames >= 1
    assert all(0 < rt < summary.loop_seconds for rt in summary.update_roundtrip_seconds)


@pytest.mark.parametrize("mode", ["distill", "naive"])
def test_the_agent_reports_its_figures_when_the_server_asks(
    stand_in: StandInServer, video: Path, tmp_path: Path, mode: str
) -> None:
    stand_in.telemetry_interval = 1.0
    agent = EdgeAgent(settings(stand_in, video, tmp_path / "out", mode=mode, max_fps=16))  # 40 frames: 2.5 s
    summary = agent.run()
    (session,) = stand_in.sessions
    reports = [m for m in session.received if isinstance(m, Telemetry)]
    assert len(reports) >= 2, reports
    frames = [r.frames for r in reports]
    assert frames == sorted(frames) and 0 < frames[-1] <= summary.frames
    last = check_telemetry(reports[-1])  # valid by the protocol's rules
    assert last.telemetry.bytes_sent <= summary.bytes_sent
    assert summary.bytes_sent == stand_in.received_once_settled(summary.bytes_sent)
    assert summary.bytes_received == stand_in.bytes_sent
    if mode == "distill":
        assert last.telemetry.student_metric == pytest.approx(stand_in.metric)
        assert last.telemetry.weights_version >= 1 and last.telemetry.stride >= 1
        assert last.histograms["inference_seconds"].count == last.telemetry.frames
    else:  # no student: no score, stride, version or inference time
        assert (last.telemetry.student_metric, last.telemetry.stride, last.telemetry.weights_version) == (
            None, None, None)
        assert last.histograms["inference_seconds"].count == 0
        assert last.histograms["blocked_seconds"].count == last.telemetry.frames


@pytest.mark.parametrize("feature", ["flow_path", "change_based"])
def test_the_report_carries_the_figures_of_the_inference_path(
    stand_in: StandInServer, video: Path, tmp_path: Path, feature: str
) -> None:
    """--flow-path reports regions per path and key ages, --change-based frames per mode and changed
    fractions; the other's fields stay absent; drops and removals are always reported."""
    stand_in.telemetry_interval = 1.0
    flow_path = dict(flow_path=True, key_interval=0, decision_threshold=0.0, max_key_age=3)
    options = flow_path if feature == "flow_path" else dict(change_based=True, backend="torch")
    agent = EdgeAgent(settings(stand_in, video, tmp_path / "out", max_fps=16, **options))  # 40 frames: 2.5 s
    summary = agent.run()
    reports = [m for m in stand_in.sessions[0].received if isinstance(m, Telemetry)]
    assert len(reports) >= 2, reports
    last = check_telemetry(reports[-1])
    report = last.telemetry
    assert (report.key_frames_dropped, report.labels_removed) == (0, 0)
    assert report.output_dropped == {"labels": 0, "overlay": 0, "state": 0}
    assert report.cluster_workers is None and report.region_queue_depth is None  # no --cluster
    if feature == "flow_path":
        assert report.change_based_frames is None and report.changed_fraction is None
        assert 0 < report.regions["segment"] and report.regions["segment"] + report.regions["flow"] == 4 * report.frames
        assert last.histograms["region_key_age_frames"].count == 4 * report.frames
    else:
        assert report.regions is None and "region_key_age_frames" not in last.histograms
        assert sum(report.change_based_frames.values()) == report.frames <= summary.frames
        assert report.change_based_frames["full"] >= 1  # the first frame builds the caches
        assert report.changed_fraction and all(0 <= f <= 1 for f in report.changed_fraction.values())


def test_no_reports_to_a_server_that_does_not_ask(stand_in: StandInServer, video: Path, tmp_path: Path) -> None:
    EdgeAgent(settings(stand_in, video, tmp_path / "out", max_fps=16, max_frames=24)).run()  # 1.5 s
    assert not [m for m in stand_in.sessions[0].received if isinstance(m, Telemetry)]


def test_flow_path_leaves_key_frames_and_updates_as_they_were(
    stand_in: StandInServer, video: Path, tmp_path: Path
) -> None:
    plain = EdgeAgent(settings(stand_in, video, tmp_path / "plain")).run()
    agent = EdgeAgent(settings(stand_in, video, tmp_path / "flow", flow_path=True, key_interval=0,
                               decision_threshold=0.0, max_key_age=40))  # keys never too old: weights make them stale
    summary = agent.run()
    assert summary.frames == summary.labelled_frames == 40
    # Algorithm 2 is untouched: as many key frames (the loop waits for each update at MIN_STRIDE), all sent.
    assert summary.key_frames == plain.key_frames == summary.frames_sent
    families = {f.name: f for f in text_string_to_metric_families(agent.metrics.exposition().decode())}
    by_path = {s.labels["path"]: s.value for s in families["shadowtutor_edge_regions"].samples
               if s.name.endswith("_total")}
    assert by_path["segment"] + by_path["flow"] == 4 * 40 and by_path["flow"] > 0
    # every weight change makes the keys stale: the frame after it is segmented whole (one frame for the versions
    # installed between two frames; none for one installed after the last, as an update may land on a loaded machine)
    followed = {v["frame_index"] for v in summary.versions_applied if v["frame_index"] < summary.frames}
    assert len(followed) >= 2 and by_path["segment"] >= 4 * len(followed)


@pytest.mark.timeout(180)
@pytest.mark.slow
def test_the_agent_labels_on_a_real_cluster_through_the_flow_path(
    stand_in: StandInServer, video: Path, tmp_path: Path
) -> None:
    """--cluster end to end: a local Ray cluster (a head without CPUs and two one-CPU worker nodes), the agent
    pipelining frames through it, workers warping regions from their keys between segmentations."""
    ray = pytest.importorskip("ray", reason="the cluster extra is not installed (pip install 'shadowtutor[cluster]')")
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0})
    try:
        for _ in range(2):
            cluster.add_node(num_cpus=1)
        agent = EdgeAgent(settings(stand_in, video, tmp_path / "out", cluster=cluster.address, max_frames=16,
                                   acceleration_trial=0))
        summary = agent.run()
    finally:
        ray.shutdown()
        cluster.shutdown()
    assert summary.frames == summary.labelled_frames == 16 and summary.key_frames == summary.frames_sent
    labels = sorted((tmp_path / "out" / "labels").glob("*.png"))
    assert len(labels) == 16 and cv2.imread(str(labels[-1]), cv2.IMREAD_UNCHANGED).shape == (48, 64)
    families = {f.name: f for f in text_string_to_metric_families(agent.metrics.exposition().decode())}
    by_path = {s.labels["path"]: s.value for s in families["shadowtutor_edge_regions"].samples
               if s.name.endswith("_total")}
    assert by_path["segment"] + by_path["flow"] == 4 * 16 and by_path["flow"] > 0  # the flow path is taken
    assert metric_values(agent.metrics.exposition())["shadowtutor_edge_cluster_workers"] == 2


def test_an_accelerations_trial_is_in_the_summary_and_the_metrics(
    stand_in: StandInServer, video: Path, tmp_path: Path
) -> None:
    """Whichever way this machine decides it, the trial's figures are reported, and a slower acceleration is
    the one that stepped aside."""
    agent = EdgeAgent(settings(stand_in, video, tmp_path / "out", change_based=True, backend="torch",
                               acceleration_trial=6, max_frames=20))
    summary = agent.run()
    trial = summary.acceleration_trial
    assert trial is not None and trial["candidate"] == "torch+change-based" and trial["frames"] == 6
    assert trial["stepped_aside"] == (trial["candidate_seconds"] > trial["plain_seconds"])
    values = metric_values(agent.metrics.exposition())
    assert values["shadowtutor_edge_acceleration_stepped_aside"] == int(trial["stepped_aside"])
    assert values["shadowtutor_edge_acceleration_speedup"] == pytest.approx(trial["speedup"])
    assert summary.labelled_frames == 20


def test_an_uplink_budget_holds_key_frames_back_and_is_reported(
    stand_in: StandInServer, tmp_path: Path
) -> None:
    # 25 FPS; a raw 64x48 key frame is about 9.3 kB: 100 kbit/s over 1 s carries one key frame a second
    clip = write_video(tmp_path / "long.mp4", 100, (64, 48))
    free = EdgeAgent(settings(stand_in, clip, tmp_path / "free")).run()
    agent = EdgeAgent(settings(stand_in, clip, tmp_path / "kept", uplink_budget="100kbps", budget_window=1))
    kept = agent.run()
    assert kept.frames == kept.labelled_frames == 100
    assert free.key_frames >= 10 and 3 <= kept.key_frames <= 6, (free.key_frames, kept.key_frames)
    values = metric_values(agent.metrics.exposition())
    assert values["shadowtutor_edge_uplink_budget_bps"] == 100_000
    assert values["shadowtutor_edge_key_frames_deferred_total"] > 0
    report = agent.metrics.telemetry()
    assert report.uplink_budget_bps == 100_000 and report.downlink_budget_bps is None
    assert report.key_frames_deferred == values["shadowtutor_edge_key_frames_deferred_total"]
    check_telemetry(report)


def test_a_budget_needs_distill_mode(stand_in: StandInServer, video: Path, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="distill mode"):
        settings(stand_in, video, tmp_path, mode="naive", downlink_budget="50kbps")


def test_the_edge_paces_key_frames_on_its_sources_clock(video: Path, tmp_path: Path) -> None:
    # a 25 FPS clip; key frames at least and at most 0.4 s apart (no cuts): every 10th frame
    params = AlgorithmParams(min_stride=2, max_stride=4, key_frame_pacing="clock", min_key_interval=0.4,
                             max_key_interval=0.4, cut_threshold=1.0)
    server = StandInServer(params=params).start()
    try:
        summary = EdgeAgent(settings(server, video, tmp_path / "out")).run()
    finally:
        server.kill()
    assert summary.frames == 40 and summary.key_frames == 4
