"""The server's memory and sessions during a load run, sampled in a background thread.

Two sources, each where available: the resident set of a local server process
(``VmRSS`` in ``/proc/PID/status``), and the server's own ``/metrics``
(``process_resident_memory_bytes``, ``shadowtutor_server_sessions``), which also works for
a server on another machine.
"""

from __future__ import annotations

import os
import threading
import time
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

RSS_METRIC = "process_resident_memory_bytes"
SESSIONS_METRIC = "shadowtutor_server_sessions"


class MemoryReadError(RuntimeError):
    """A memory source could not be read."""


@dataclass(frozen=True)
class MemorySample:
    """One sample at time ``t`` (seconds; ``time.monotonic()`` as taken); a source that failed is ``None``."""

    t: float
    rss_bytes: int | None  # /proc/PID/status VmRSS
    metrics_rss_bytes: int | None  # the server's process_resident_memory_bytes
    sessions: int | None  # the server's shadowtutor_server_sessions gauge
    load1: float | None = None  # this machine's 1-minute load average (other work competing for the CPU)

    def to_dict(self) -> dict[str, float | int | None]:
        return asdict(self)


def read_rss(pid: int, proc: Path = Path("/proc")) -> int:
    """Resident set size of process ``pid`` in bytes (``VmRSS``)."""
    status = proc / str(pid) / "status"
    try:
        text = status.read_text()
    except OSError as exc:
        raise MemoryReadError(f"cannot read {status}: {exc}") from None
    for line in text.splitlines():
        if line.startswith("VmRSS:"):
            value, unit = line.split()[1:3]
            if unit != "kB":
                raise MemoryReadError(f"{status}: unexpected VmRSS unit {unit!r}")
            return int(value) * 1024
    raise MemoryReadError(f"{status} has no VmRSS line (a zombie process?)")


def parse_server_metrics(text: str) -> tuple[int | None, int | None]:
    """``(process_resident_memory_bytes, shadowtutor_server_sessions)`` from a Prometheus exposition."""
    found: dict[str, int] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name in (RSS_METRIC, SESSIONS_METRIC) and not sample.labels:
                found[sample.name] = int(sample.value)
    return found.get(RSS_METRIC), found.get(SESSIONS_METRIC)


def scrape(url: str, timeout: float = 2.0) -> str:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return response.read().decode()
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise MemoryReadError(f"cannot scrape {url}: {exc}") from None


class MemorySampler:
    """Samples every ``interval`` seconds from :meth:`start` until :meth:`stop`; at least one source is needed."""

    def __init__(self, pid: int | None, metrics_url: str | None, interval: float = 1.0) -> None:
        if pid is None and metrics_url is None:
            raise ValueError("the memory sampler needs a server pid or a /metrics URL")
        self.pid = pid
        self.metrics_url = metrics_url
        self.interval = interval
        self.samples: list[MemorySample] = []
        self.failures: dict[str, str] = {}  # source -> the last error, for the report
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="load-memory", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    @property
    def latest(self) -> MemorySample | None:
        return self.samples[-1] if self.samples else None

    def sample(self) -> MemorySample:
        now = time.monotonic()
        rss = metrics_rss = sessions = None
        if self.pid is not None:
            try:
                rss = read_rss(self.pid)
            except MemoryReadError as exc:
                self.failures["proc"] = str(exc)
        if self.metrics_url is not None:
            try:
                metrics_rss, sessions = parse_server_metrics(scrape(self.metrics_url))
            except MemoryReadError as exc:
                self.failures["metrics"] = str(exc)
        return MemorySample(now, rss, metrics_rss, sessions, round(os.getloadavg()[0], 2))

    def _loop(self) -> None:
        next_due = time.monotonic()
        while not self._stop.is_set():
            self.samples.append(self.sample())
            next_due = max(next_due + self.interval, time.monotonic())
            self._stop.wait(next_due - time.monotonic())
