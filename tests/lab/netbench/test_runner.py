"""The sweep: reading the server's counters, the configuration, and (as root) a smoke run of the real thing."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from edge_agent.settings import EdgeSettings
from services.server.metrics.server_metrics import ServerMetrics
from shadowtutor.protocol.defaults import DEFAULT_FRAME_QUALITY
from shadowtutor_lab.demo.processes import shadowtutor_command
from shadowtutor_lab.netbench.analysis import all_metrics
from shadowtutor_lab.netbench.netns import list_namespaces, owner_pid
from shadowtutor_lab.netbench.results import Results
from shadowtutor_lab.netbench.runner import (
    NetworkBenchConfig,
    agent_codec_defaults,
    run_network_bench,
    server_work_from_metrics,
    source_revision,
)


def test_server_work_comes_from_the_real_servers_metric_names() -> None:
    metrics = ServerMetrics()
    for seconds in (0.01, 0.03):
        metrics.teacher_latency.observe(seconds)
    metrics.distill_latency.observe(0.4)
    metrics.distill_steps.inc(5)
    work = server_work_from_metrics(metrics.exposition().decode())
    assert work.teacher_count == 2 and work.teacher_seconds == pytest.approx(0.04)
    assert (work.distill_count, work.steps) == (1, 5) and work.distill_seconds == pytest.approx(0.4)
    assert work.minus(work).teacher_count == 0


def test_the_meta_names_the_agents_codec_defaults_and_the_code_revision() -> None:
    defaults = agent_codec_defaults()
    settings = EdgeSettings(server="ws://h:1", source="v.mp4")
    assert defaults["frame_codecs"] == list(settings.frame_codecs)
    assert defaults["weight_codecs"] == list(settings.weight_codecs)
    assert settings.frame_quality is None and defaults["frame_quality"] == dict(DEFAULT_FRAME_QUALITY)
    assert re.fullmatch(r"[0-9a-f]{40}(\+dirty)?|unknown", source_revision())


def test_metrics_without_the_counters_are_an_error() -> None:
    with pytest.raises(RuntimeError, match="lacks"):
        server_work_from_metrics("# nothing here\n")


@pytest.mark.parametrize(
    ("overrides", "match"),
    [(dict(scenes=()), "at least one scene"), (dict(bandwidths=(8.0, 0.0)), "positive"),
     (dict(scenes=(Path("a/x"), Path("b/x"))), "distinct names")],
)
def test_bad_configurations_are_refused(tmp_path: Path, overrides: dict, match: str) -> None:
    values = dict(scenes=(tmp_path / "s",), out_dir=tmp_path, work_dir=tmp_path / "w") | overrides
    with pytest.raises(ValueError, match=match):
        NetworkBenchConfig(**values)


SMOKE_FRAMES = 32


@pytest.fixture(scope="module")
def smoke_scene(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("scenes") / "fixed-street"
    subprocess.run(
        shadowtutor_command("scenes", "make", "--preset", "fixed-street", "--frames", str(SMOKE_FRAMES),
                            "--seed", "5", "--size", "160x96", "--out", str(out), "--no-progress"),
        check=True, timeout=120, capture_output=True,
    )
    return out


@pytest.mark.slow
@pytest.mark.usefixtures("netns")
def test_smoke_sweep_two_bandwidths_real_processes(smoke_scene: Path, tmp_path: Path) -> None:
    config = NetworkBenchConfig(scenes=(smoke_scene,), out_dir=tmp_path / "out", work_dir=tmp_path / "work",
                                bandwidths=(40.0, 8.0), command="smoke")
    results = run_network_bench(config)
    assert results == Results.load(tmp_path / "out" / "results.json")
    assert [(r.bandwidth_mbps, r.variant) for r in results.runs] == [
        (b, v) for b in (40.0, 8.0) for v in ("shadowtutor", "naive-h264", "naive-jpeg", "naive-raw")
    ]
    calibrated = [0.85 <= c[way] / c["mbps"] <= 1.01 for c in results.links for way in ("up_mbps", "down_mbps")]
    assert all(calibrated), results.links  # the probe's figures, when it fails
    metrics = all_metrics(results)
    for (_, mbps, variant), m in metrics.items():
        r = m.record
        assert r.frames == r.labelled_frames == SMOKE_FRAMES
        assert r.bytes_sent > 0 and r.wire_bytes_up >= r.bytes_sent  # the veth saw at least the payload
        uplink = (r.bytes_sent - r.handshake_bytes_sent) * 8 / 1e6 / r.loop_seconds
        assert uplink < 1.05 * mbps  # never faster than the link (Mbps adds both directions, each shaped)
        if variant == "shadowtutor":
            assert r.key_frames == r.frames_sent >= 1 and m.latencies is not None and m.bounds is not None
            assert len(r.update_roundtrip_seconds) == r.frames_sent
            assert r.handshake_bytes_received > 100_000  # the WELCOME carried the student
        else:
            assert r.key_frames == r.frames_sent == SMOKE_FRAMES and r.miou_percent == pytest.approx(100.0)
    raw_frame = 160 * 96 * 3
    assert metrics[("fixed-street", 8.0, "naive-raw")].up_per_key_frame > raw_frame
    assert metrics[("fixed-street", 8.0, "naive-jpeg")].up_per_key_frame < raw_frame / 3
    assert metrics[("fixed-street", 8.0, "naive-h264")].up_per_frame < metrics[("fixed-street", 8.0,
                                                                                   "naive-jpeg")].up_per_frame
    # at 8 Mbps a raw frame alone takes 46 ms on the wire, so naive raw cannot beat ~21 FPS
    assert metrics[("fixed-street", 8.0, "naive-raw")].fps < 8e6 / 8 / raw_frame
    assert not [n for n in list_namespaces() if owner_pid(n) == os.getpid()]  # the sweep cleaned up
