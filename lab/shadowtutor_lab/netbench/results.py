"""The results file of ``shadowtutor bench network``: one record per (scene, bandwidth, variant) run.

Only what was measured goes in: counts, bytes and times from the agent's ``summary.json``, the
server's ``/metrics`` over the run, the veth's byte counters, and the mIoU of the label maps.
Everything derived (FPS, Mbps, the paper's Table 1 components, the bounds) is computed from it
by :mod:`shadowtutor_lab.netbench.analysis`, so the report can be regenerated from the committed file.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from shadowtutor_lab.netbench.variants import VARIANT_NAMES

FORMAT = "shadowtutor-bench-network/1"
RESULTS_JSON = "results.json"


class ResultsError(ValueError):
    """A results file that is missing, of another format, or inconsistent."""


@dataclass(frozen=True)
class ServerWork:
    """What the server's ``/metrics`` counted during one run (differences of its counters)."""

    teacher_seconds: float = 0.0  # teacher latency (queue wait + labelling), summed over key frames
    teacher_count: int = 0
    distill_seconds: float = 0.0  # whole Algorithm 1 runs, summed over key frames
    distill_count: int = 0
    steps: int = 0  # optimisation steps of those runs

    def minus(self, before: ServerWork) -> ServerWork:
        return ServerWork(
            self.teacher_seconds - before.teacher_seconds, self.teacher_count - before.teacher_count,
            self.distill_seconds - before.distill_seconds, self.distill_count - before.distill_count,
            self.steps - before.steps,
        )


@dataclass(frozen=True)
class RunRecord:
    scene: str
    bandwidth_mbps: float
    variant: str
    frames: int
    labelled_frames: int
    key_frames: int
    frames_sent: int  # KEY_FRAME messages sent (every frame in naive mode)
    loop_seconds: float  # the agent's frame loop: first frame read to last frame labelled
    wall_seconds: float  # the agent's whole run, start-up (connect, WELCOME) included
    waited_seconds: float  # time the frame loop was blocked on the network
    bytes_sent: int  # WebSocket messages, as the agent counted them
    bytes_received: int
    handshake_bytes_sent: int  # HELLO
    handshake_bytes_received: int  # WELCOME (the full student in ShadowTutor mode)
    wire_bytes_up: int  # the edge's veth end: Ethernet frames sent during the agent's run (TCP/IP included)
    wire_bytes_down: int
    updates_applied: int
    miou_percent: float  # mean per-frame mIoU of the agent's label maps against the teacher's
    update_roundtrip_seconds: list[float] = field(default_factory=list)
    server: ServerWork = field(default_factory=ServerWork)

    @property
    def key(self) -> tuple[str, float, str]:
        return (self.scene, self.bandwidth_mbps, self.variant)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunRecord:
        try:
            values = dict(data)
            values["server"] = ServerWork(**values.get("server", {}))
            return cls(**values)
        except TypeError as exc:
            raise ResultsError(f"a run record does not fit {cls.__name__}: {exc}") from exc


@dataclass
class Results:
    meta: dict[str, Any] = field(default_factory=dict)  # command, machine, link, parameters, variants
    scenes: dict[str, dict[str, Any]] = field(default_factory=dict)  # name -> preset, camera, category, ...
    links: list[dict[str, float]] = field(default_factory=list)  # one link check per bandwidth
    runs: list[RunRecord] = field(default_factory=list)

    def add(self, record: RunRecord) -> None:
        """Add a run, replacing an earlier one of the same scene, bandwidth and variant."""
        self.runs = [r for r in self.runs if r.key != record.key] + [record]

    def has(self, scene: str, bandwidth_mbps: float, variant: str) -> bool:
        return any(r.key == (scene, bandwidth_mbps, variant) for r in self.runs)

    def run(self, scene: str, bandwidth_mbps: float, variant: str) -> RunRecord | None:
        return next((r for r in self.runs if r.key == (scene, bandwidth_mbps, variant)), None)

    def bandwidths(self) -> list[float]:
        return sorted({r.bandwidth_mbps for r in self.runs}, reverse=True)

    def variants(self) -> list[str]:
        """The variants run, in the order of :data:`VARIANT_NAMES` (then any others as they came)."""
        seen = list(dict.fromkeys(r.variant for r in self.runs))
        order = {name: i for i, name in enumerate(VARIANT_NAMES)}
        return sorted(seen, key=lambda v: order.get(v, len(order)))

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": FORMAT, "meta": self.meta, "scenes": self.scenes, "links": self.links,
            "runs": [asdict(r) for r in self.runs],
        }

    def save(self, path: Path) -> None:
        """Write atomically (the benchmark saves after every run)."""
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(self.to_dict(), indent=1) + "\n")
        tmp.replace(path)

    @classmethod
    def load(cls, path: Path) -> Results:
        if not path.is_file():
            raise ResultsError(f"no results file at {path}")
        try:
            data = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise ResultsError(f"cannot read {path}: {exc}") from exc
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise ResultsError(f"{path} is not a {FORMAT} results file")
        runs = [RunRecord.from_dict(r) for r in data.get("runs", [])]
        unknown = sorted({r.scene for r in runs} - set(data.get("scenes", {})))
        if unknown:
            raise ResultsError(f"{path}: runs of scenes {unknown} that the file does not describe")
        return cls(data.get("meta", {}), data.get("scenes", {}), data.get("links", []), runs)
