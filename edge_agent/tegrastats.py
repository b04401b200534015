"""Jetson power, temperature and load figures from ``tegrastats``, as Prometheus gauges of the edge.

On a Jetson, the agent runs NVIDIA's ``tegrastats`` (part of L4T; mounted into the container,
docs/deploy/jetson.md) and parses each line it prints; elsewhere there is no ``tegrastats`` and the
gauges have no series. The line format differs between JetPack releases (power rails as
``NAME cur/avg`` in mW on JetPack 4, ``NAME curmW/avgmW`` from JetPack 5 on, a timestamp first on
JetPack 6, sensors that are off read ``-256C``); :func:`parse_line` reads them all.

If the agent dies, ``tegrastats`` goes too: its next line finds the pipe closed (SIGPIPE).
"""

from __future__ import annotations

import logging
import re
import shutil
import subprocess
import threading
from dataclasses import dataclass, field
from pathlib import Path

from prometheus_client import CollectorRegistry, Gauge

log = logging.getLogger(__name__)

DEFAULT_PATHS = ("/usr/bin/tegrastats",)
_RAM = re.compile(r"\bRAM (\d+)/(\d+)MB")
_GPU = re.compile(r"\bGR3D_FREQ (\d+)%")
_EMC = re.compile(r"\bEMC_FREQ (\d+)%")
_TEMPERATURE = re.compile(r"(?<![\w@])([A-Za-z][A-Za-z0-9_]*)@(-?\d+(?:\.\d+)?)C\b")
# JetPack 5 and 6
_POWER_MW = re.compile(r"(?<![\w@])([A-Za-z][A-Za-z0-9_]*) (\d+)mW/(\d+)mW\b")
# JetPack 4: mW, no unit
_POWER_BARE = re.compile(r"(?<![\w@])([A-Z][A-Z0-9_]*) (\d+)/(\d+)(?=\s|$)")
SENSOR_OFF_C = -256.0


@dataclass(kw_only=True)
class TegraSample:
    """One ``tegrastats`` line: what the board reported (absent fields stay ``None`` or empty)."""

    ram_used_bytes: int | None = None
    ram_total_bytes: int | None = None
    # GR3D_FREQ, 0..1
    gpu_utilization: float | None = None
    # memory controller, 0..1
    emc_utilization: float | None = None
    # zone (lower case) -> degrees C
    temperatures_c: dict[str, float] = field(default_factory=dict)
    # rail -> current draw in W
    power_w: dict[str, float] = field(default_factory=dict)


def parse_line(line: str) -> TegraSample | None:
    """The figures of one ``tegrastats`` line, or ``None`` for a line that is not one."""
    ram = _RAM.search(line)
    if ram is None:
        return None
    sample = TegraSample(
        ram_used_bytes=int(ram.group(1)) << 20, ram_total_bytes=int(ram.group(2)) << 20
    )
    if (gpu := _GPU.search(line)) is not None:
        sample.gpu_utilization = int(gpu.group(1)) / 100
    if (emc := _EMC.search(line)) is not None:
        sample.emc_utilization = int(emc.group(1)) / 100
    for zone, celsius in _TEMPERATURE.findall(line):
        if float(celsius) > SENSOR_OFF_C:
            sample.temperatures_c[zone.lower()] = float(celsius)
    for pattern in (_POWER_MW, _POWER_BARE):
        for rail, current, _average in pattern.findall(line):
            sample.power_w[rail] = int(current) / 1000
    return sample


class TegraGauges:
    """The edge's Jetson gauges, labelled ``edge_id`` (and ``zone`` or ``rail``); no series until a
    sample."""

    def __init__(self, registry: CollectorRegistry, edge_id: str) -> None:
        self.edge_id = edge_id
        self.power = Gauge(
            "shadowtutor_edge_power_watts",
            "Jetson power rail draw (tegrastats)",
            ["edge_id", "rail"],
            registry=registry,
        )
        self.temperature = Gauge(
            "shadowtutor_edge_temperature_celsius",
            "Jetson thermal zone (tegrastats)",
            ["edge_id", "zone"],
            registry=registry,
        )
        self.gpu = Gauge(
            "shadowtutor_edge_gpu_utilization_ratio",
            "Jetson GPU load, 0..1 (tegrastats GR3D_FREQ)",
            ["edge_id"],
            registry=registry,
        )
        self.emc = Gauge(
            "shadowtutor_edge_emc_utilization_ratio",
            "Jetson memory controller load, 0..1 (tegrastats EMC_FREQ)",
            ["edge_id"],
            registry=registry,
        )
        self.ram_used = Gauge(
            "shadowtutor_edge_ram_used_bytes",
            "Jetson RAM in use, CPU and GPU share it (tegrastats)",
            ["edge_id"],
            registry=registry,
        )
        self.ram_total = Gauge(
            "shadowtutor_edge_ram_total_bytes",
            "Jetson RAM (tegrastats)",
            ["edge_id"],
            registry=registry,
        )

    def update(self, sample: TegraSample) -> None:
        edge = self.edge_id
        for gauge, value in (
            (self.gpu, sample.gpu_utilization),
            (self.emc, sample.emc_utilization),
            (self.ram_used, sample.ram_used_bytes),
            (self.ram_total, sample.ram_total_bytes),
        ):
            if value is not None:
                gauge.labels(edge_id=edge).set(value)
        for zone, celsius in sample.temperatures_c.items():
            self.temperature.labels(edge_id=edge, zone=zone).set(celsius)
        for rail, watts in sample.power_w.items():
            self.power.labels(edge_id=edge, rail=rail).set(watts)


def find_tegrastats() -> str | None:
    """Path of ``tegrastats`` on this machine (a Jetson), or ``None``."""
    found = shutil.which("tegrastats")
    if found:
        return found
    return next((path for path in DEFAULT_PATHS if Path(path).is_file()), None)


class TegrastatsMonitor:
    """Runs ``tegrastats`` and feeds its lines to :class:`TegraGauges` from a daemon thread."""

    def __init__(self, gauges: TegraGauges, executable: str, interval_ms: int = 1000) -> None:
        self.gauges = gauges
        self.samples = 0
        self._process = subprocess.Popen(
            [executable, "--interval", str(interval_ms)],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            stdin=subprocess.DEVNULL,
            text=True,
            bufsize=1,
        )
        self._thread = threading.Thread(target=self._read, name="tegrastats", daemon=True)
        self._thread.start()

    @classmethod
    def start_if_available(
        cls, registry: CollectorRegistry, edge_id: str, executable: str | None = None
    ) -> TegrastatsMonitor | None:
        """A running monitor on a Jetson; ``None`` (and no gauges) where there is no
        ``tegrastats``."""
        executable = executable or find_tegrastats()
        if executable is None:
            log.debug("no tegrastats here: no Jetson power and thermal figures")
            return None
        try:
            monitor = cls(TegraGauges(registry, edge_id), executable)
        except OSError as exc:
            log.warning("cannot run %s (%s): no Jetson power and thermal figures", executable, exc)
            return None
        log.info("Jetson power and thermal figures from %s", executable)
        return monitor

    @property
    def pid(self) -> int:
        return self._process.pid

    def _read(self) -> None:
        assert self._process.stdout is not None
        for line in self._process.stdout:
            sample = parse_line(line)
            if sample is not None:
                self.gauges.update(sample)
                self.samples += 1

    def stop(self) -> None:
        """End ``tegrastats`` and the reader."""
        if self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
        self._thread.join(timeout=5)
