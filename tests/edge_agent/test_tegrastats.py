"""Jetson power/thermal gauges from tegrastats. No Jetson here: the parser is checked on real line
formats of several JetPack releases, and the monitor runs a stand-in ``tegrastats`` script that
prints such lines (the real binary exists only on L4T)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from edge_agent.tegrastats import TegraGauges, TegrastatsMonitor, parse_line

REPO_ROOT = Path(__file__).resolve().parents[2]

JETPACK_4_NANO = (
    "RAM 1733/3964MB (lfb 70x4MB) SWAP 0/1982MB (cached 0MB) IRAM 0/252kB(lfb 252kB) "
    "CPU [12%@1479,8%@1479,10%@1479,7%@1479] EMC_FREQ 9%@1600 GR3D_FREQ 31%@921 APE 25 PLL@27.5C CPU@30C "
    "PMIC@50C GPU@28C AO@36C thermal@28.75C POM_5V_IN 2086/2131 POM_5V_GPU 120/95 POM_5V_CPU 436/436"
)
JETPACK_4_AGX_XAVIER = (
    "RAM 1574/15692MB (lfb 3208x4MB) SWAP 0/7846MB (cached 0MB) CPU [2%@1190,1%@1190,off,off,off,off,off,off] "
    "EMC_FREQ 0% GR3D_FREQ 0% AO@38.5C GPU@38C Tdiode@40.75C PMIC@100C AUX@37.5C CPU@39.5C thermal@38.2C "
    "Tboard@38C GPU 0/0 CPU 153/153 SOC 1377/1377 CV 0/0 VDDRQ 153/153 SYS5V 1575/1575"
)
JETPACK_5_AGX_ORIN = (
    "RAM 3442/30536MB (lfb 6197x4MB) SWAP 0/15268MB (cached 0MB) CPU [2%@729,1%@729,0%@729,0%@729,off,off,off,off] "
    "EMC_FREQ 0%@2133 GR3D_FREQ 0%@[0,0] VIC_FREQ 729 APE 174 CV0@-256C CPU@44.25C SOC2@41.125C SOC0@41.843C "
    "CV1@-256C GPU@40.125C tj@44.25C SOC1@40.281C CV2@-256C VDD_GPU_SOC 2386mW/2386mW VDD_CPU_CV 397mW/397mW "
    "VIN_SYS_5V0 2929mW/2929mW VDDQ_VDD2_1V8AO 301mW/301mW"
)
JETPACK_6_ORIN_NANO = (
    "06-12-2024 10:43:27 RAM 2135/7620MB (lfb 4x4MB) SWAP 0/3810MB (cached 0MB) "
    "CPU [0%@729,0%@729,0%@729,0%@729,0%@729,0%@729] EMC_FREQ 0%@2133 GR3D_FREQ 54%@[305] NVENC off NVDEC off "
    "NVJPG off NVJPG1 off VIC off OFA off APE 200 cpu@46.375C soc2@45.281C soc0@45.406C gpu@44.843C tj@46.375C "
    "soc1@45.281C VDD_IN 4432mW/4432mW VDD_CPU_GPU_CV 476mW/476mW VDD_SOC 1349mW/1349mW"
)


def test_jetpack_4_nano_line() -> None:
    sample = parse_line(JETPACK_4_NANO)
    assert (sample.ram_used_bytes, sample.ram_total_bytes) == (1733 << 20, 3964 << 20)
    assert sample.gpu_utilization == 0.31 and sample.emc_utilization == 0.09
    assert sample.temperatures_c == {"pll": 27.5, "cpu": 30.0, "pmic": 50.0, "gpu": 28.0, "ao": 36.0,
                                     "thermal": 28.75}
    assert sample.power_w == {"POM_5V_IN": 2.086, "POM_5V_GPU": 0.12, "POM_5V_CPU": 0.436}  # current, not average


def test_jetpack_4_xavier_line_with_bare_rail_names() -> None:
    sample = parse_line(JETPACK_4_AGX_XAVIER)
    assert sample.gpu_utilization == 0.0 and sample.emc_utilization == 0.0
    assert sample.temperatures_c["gpu"] == 38.0 and sample.temperatures_c["tdiode"] == 40.75
    assert sample.power_w == {"GPU": 0.0, "CPU": 0.153, "SOC": 1.377, "CV": 0.0, "VDDRQ": 0.153, "SYS5V": 1.575}


def test_jetpack_5_orin_line_skips_sensors_that_are_off() -> None:
    sample = parse_line(JETPACK_5_AGX_ORIN)
    assert sample.ram_used_bytes == 3442 << 20 and sample.gpu_utilization == 0.0
    assert "cv0" not in sample.temperatures_c and sample.temperatures_c["tj"] == 44.25  # -256C: off
    assert sample.power_w == {"VDD_GPU_SOC": 2.386, "VDD_CPU_CV": 0.397, "VIN_SYS_5V0": 2.929,
                              "VDDQ_VDD2_1V8AO": 0.301}


def test_jetpack_6_line_with_timestamp() -> None:
    sample = parse_line(JETPACK_6_ORIN_NANO)
    assert sample.gpu_utilization == 0.54 and sample.ram_total_bytes == 7620 << 20
    assert sample.temperatures_c["gpu"] == 44.843 and len(sample.temperatures_c) == 6
    assert sample.power_w == {"VDD_IN": 4.432, "VDD_CPU_GPU_CV": 0.476, "VDD_SOC": 1.349}


@pytest.mark.parametrize("line", ["", "tegrastats: command not found", "CPU [1%@729] GR3D_FREQ 0%"])
def test_other_lines_are_not_samples(line: str) -> None:
    assert parse_line(line) is None


def fake_tegrastats(tmp_path: Path, line: str = JETPACK_6_ORIN_NANO) -> str:
    """A stand-in for L4T's tegrastats: prints a real JetPack 6 line every 50 ms."""
    script = tmp_path / "tegrastats"
    script.write_text(f"#!/bin/sh\nwhile true; do echo '{line}'; sleep 0.05; done\n")
    script.chmod(0o755)
    return str(script)


def test_monitor_exports_the_figures_and_stops(tmp_path: Path) -> None:
    registry = CollectorRegistry()
    monitor = TegrastatsMonitor.start_if_available(registry, "jetson-1", executable=fake_tegrastats(tmp_path))
    try:
        deadline = time.monotonic() + 10
        while monitor.samples < 2:
            assert time.monotonic() < deadline, "no tegrastats line parsed"
            time.sleep(0.02)
        text = generate_latest(registry).decode()
        assert 'shadowtutor_edge_power_watts{edge_id="jetson-1",rail="VDD_IN"} 4.432' in text
        assert 'shadowtutor_edge_temperature_celsius{edge_id="jetson-1",zone="tj"} 46.375' in text
        assert 'shadowtutor_edge_gpu_utilization_ratio{edge_id="jetson-1"} 0.54' in text
    finally:
        monitor.stop()
    assert monitor._process.poll() is not None


def test_absent_without_tegrastats(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("edge_agent.tegrastats.find_tegrastats", lambda: None)
    registry = CollectorRegistry()
    assert TegrastatsMonitor.start_if_available(registry, "x86-box") is None
    assert "shadowtutor_edge_power_watts" not in generate_latest(registry).decode()
    gauges_only = CollectorRegistry()
    TegraGauges(gauges_only, "e")  # the gauges alone have no series either
    assert "edge_id=" not in generate_latest(gauges_only).decode()


def _gone(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True


def test_tegrastats_does_not_outlive_a_killed_agent(tmp_path: Path) -> None:
    executable = fake_tegrastats(tmp_path)
    parent = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import time
        from prometheus_client import CollectorRegistry
        from edge_agent.tegrastats import TegrastatsMonitor
        monitor = TegrastatsMonitor.start_if_available(CollectorRegistry(), "e", executable={executable!r})
        print(monitor.pid, flush=True)
        time.sleep(60)
    """)], stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})
    try:
        child = int(parent.stdout.readline())
        assert not _gone(child)
    finally:
        parent.send_signal(signal.SIGKILL)
        parent.wait()
    deadline = time.monotonic() + 5
    while not _gone(child):
        assert time.monotonic() < deadline, f"tegrastats (pid {child}) outlived the killed agent"
        time.sleep(0.05)
