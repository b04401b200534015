"""Shaping both directions of the link with ``tc``: a token bucket (tbf), optionally behind a netem delay.

Each veth end shapes what it sends, so the edge's end limits the uplink and the server's end the
downlink, both at the same rate. ``tc`` rates are decimal: ``8mbit`` is 8 * 10^6 bit/s.

The bucket is kept small (:data:`BURST_SECONDS` of traffic, at least :data:`MIN_BURST_BYTES`), so
that a key frame of a few tens of kB cannot slip through at the veth's own speed after a quiet
spell; ``latency`` bounds the queue (packets that would wait longer are dropped, as on a real
bottleneck, and TCP backs off).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from shadowtutor_lab.netbench.netns import NamespaceLink, NetnsError, Side, run_command

PAPER_BANDWIDTHS_MBPS = (90.0, 80.0, 60.0, 40.0, 20.0, 12.0, 8.0)  # the sweep of the paper's section 6.4
BURST_SECONDS = 0.004
MIN_BURST_BYTES = 4096


@dataclass(frozen=True)
class LinkShape:
    mbps: float  # rate of each direction, 10^6 bit/s
    latency_ms: float = 100.0  # tbf: longest time a packet may wait in the bucket's queue
    delay_ms: float = 0.0  # netem: one-way delay added in each direction (0: no netem)

    def __post_init__(self) -> None:
        if not self.mbps > 0:
            raise ValueError(f"bandwidth must be > 0 Mbps, got {self.mbps}")
        if not self.latency_ms > 0:
            raise ValueError(f"tbf latency must be > 0 ms, got {self.latency_ms}")
        if self.delay_ms < 0:
            raise ValueError(f"added delay must be >= 0 ms, got {self.delay_ms}")

    @property
    def burst_bytes(self) -> int:
        return max(MIN_BURST_BYTES, math.ceil(self.mbps * 1e6 / 8 * BURST_SECONDS))

    def tbf_args(self) -> list[str]:
        rate, latency = f"{self.mbps:g}mbit", f"{self.latency_ms:g}ms"
        return ["tbf", "rate", rate, "burst", str(self.burst_bytes), "latency", latency]

    def qdisc_commands(self, side: Side) -> list[list[str]]:
        """The ``tc`` commands that shape what ``side`` sends (after its root qdisc was removed)."""
        tc = ["tc", "-n", side.namespace, "qdisc", "add", "dev", side.interface]
        if self.delay_ms == 0:
            return [[*tc, "root", "handle", "1:", *self.tbf_args()]]
        return [
            [*tc, "root", "handle", "1:", "netem", "delay", f"{self.delay_ms:g}ms"],
            [*tc, "parent", "1:", "handle", "10:", *self.tbf_args()],
        ]


def apply_shape(link: NamespaceLink, shape: LinkShape) -> None:
    """Replace the shaping of both directions of ``link`` by ``shape``."""
    for side in link.sides:
        run_command(["tc", "-n", side.namespace, "qdisc", "del", "dev", side.interface, "root"], check=False)
        for command in shape.qdisc_commands(side):
            try:
                run_command(command)
            except NetnsError as exc:
                if "netem" in command and "unknown" in str(exc):
                    raise NetnsError(
                        f"--delay-ms needs the kernel's netem qdisc (module sch_netem), which this kernel "
                        f"lacks: {exc}"
                    ) from exc
                raise


def describe_shaping(link: NamespaceLink) -> dict[str, str]:
    """``tc qdisc show`` of each side, for the results file (what the kernel actually holds)."""
    return {
        role: run_command(["tc", "-n", side.namespace, "qdisc", "show", "dev", side.interface]).stdout.strip()
        for role, side in zip(("server", "edge"), link.sides, strict=True)
    }
