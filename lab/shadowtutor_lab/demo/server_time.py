"""The server's own compute time, read from its Prometheus ``/metrics`` before and after a run."""

from __future__ import annotations

import re
import urllib.request
from dataclasses import dataclass

_PREFIX = "shadowtutor_server_"
_SAMPLE = re.compile(r"^(?P<name>[a-z_]+)\s+(?P<value>[-+0-9.eE]+|NaN)$", re.MULTILINE)


@dataclass(frozen=True)
class ServerTime:
    """Cumulative seconds the server spent labelling key frames and distilling, and how often."""

    teacher_seconds: float = 0.0  # queueing for the teacher plus its inference
    teacher_frames: int = 0
    distill_seconds: float = 0.0  # whole Algorithm 1 runs
    distill_runs: int = 0

    def __sub__(self, other: ServerTime) -> ServerTime:
        return ServerTime(self.teacher_seconds - other.teacher_seconds, self.teacher_frames - other.teacher_frames,
                          self.distill_seconds - other.distill_seconds, self.distill_runs - other.distill_runs)


def parse_server_time(text: str) -> ServerTime:
    """The four counters from a ``/metrics`` page (zero where a series has no sample yet)."""
    values = {m["name"]: float(m["value"]) for m in _SAMPLE.finditer(text)}

    def get(name: str) -> float:
        return values.get(_PREFIX + name, 0.0)

    return ServerTime(get("teacher_latency_seconds_sum"), int(get("teacher_latency_seconds_count")),
                      get("distill_latency_seconds_sum"), int(get("distill_latency_seconds_count")))


def scrape_server_time(metrics_url: str, timeout: float = 10.0) -> ServerTime:
    with urllib.request.urlopen(metrics_url, timeout=timeout) as response:
        return parse_server_time(response.read().decode())
