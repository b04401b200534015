"""Reading the server's memory: /proc/PID/status, its /metrics, and the sampling thread."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from services.server.metrics.server_metrics import ServerMetrics
from shadowtutor_lab.demo.processes import free_port
from shadowtutor_lab.stress.load_memory import (
    MemoryReadError,
    MemorySampler,
    parse_server_metrics,
    read_rss,
)

STATUS = "Name:\tpython\nVmPeak:\t  900000 kB\nVmRSS:\t  123456 kB\nThreads:\t4\n"


def test_read_rss_takes_vmrss_in_bytes(tmp_path: Path) -> None:
    (tmp_path / "42").mkdir()
    (tmp_path / "42" / "status").write_text(STATUS)
    assert read_rss(42, tmp_path) == 123456 * 1024


def test_read_rss_of_this_process_is_plausible() -> None:
    assert 10 * 2**20 < read_rss(os.getpid()) < 64 * 2**30


def test_read_rss_errors_name_the_file(tmp_path: Path) -> None:
    with pytest.raises(MemoryReadError, match="cannot read .*7/status"):
        read_rss(7, tmp_path)
    (tmp_path / "8").mkdir()
    (tmp_path / "8" / "status").write_text("Name:\tzombie\nState:\tZ\n")
    with pytest.raises(MemoryReadError, match="no VmRSS"):
        read_rss(8, tmp_path)


def test_parse_server_metrics_reads_the_servers_own_exposition() -> None:
    metrics = ServerMetrics()
    metrics.sessions.set(3)
    rss, sessions = parse_server_metrics(metrics.exposition().decode())
    assert sessions == 3
    assert rss is not None and rss > 10 * 2**20  # this process's RSS (prometheus_client's process collector)
    assert parse_server_metrics("# nothing here\n") == (None, None)


def test_sampler_samples_every_interval_and_records_a_failing_source() -> None:
    unreachable = f"http://127.0.0.1:{free_port()}/metrics"  # nothing listens there
    sampler = MemorySampler(os.getpid(), unreachable, interval=0.05)
    sampler.start()
    time.sleep(0.3)
    sampler.stop()
    assert len(sampler.samples) >= 3
    assert all(s.rss_bytes and s.metrics_rss_bytes is None and s.sessions is None for s in sampler.samples)
    times = [s.t for s in sampler.samples]
    assert times == sorted(times) and sampler.latest is sampler.samples[-1]
    assert "cannot scrape" in sampler.failures["metrics"]


def test_sampler_needs_a_source() -> None:
    with pytest.raises(ValueError, match="pid or a /metrics URL"):
        MemorySampler(None, None)
